package inference

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// SGLang is stock SGLang's native API as it ships (docs/trainer-protocol.md,
// "Inference engines", names the source files each field comes from):
// /generate, /model_info (/get_model_info before it), /server_info
// (/get_server_info before it), /update_weights_from_disk, /health.
type SGLang struct{ *Client }

// Kind is EngineSGLang.
func (s *SGLang) Kind() string { return EngineSGLang }

// URL is the server's base URL.
func (s *SGLang) URL() string { return s.BaseURL }

// Generate runs /generate and normalises the answer.
func (s *SGLang) Generate(ctx context.Context, req Request) (*Generation, error) {
	return s.generate(ctx, s.Kind(), req)
}

func (s *SGLang) generate(ctx context.Context, kind string, req Request) (*Generation, error) {
	sp := SamplingParams{Temperature: req.Temperature, TopP: req.TopP, MaxNewTokens: req.MaxNewTokens, StopTokenIDs: req.StopTokenIDs}
	if kind == EngineSGLang {
		sp.SamplingSeed = req.Seed // SGLang's SamplingParams takes no "seed" (an unknown key is a 400)
	} else {
		sp.Seed = req.Seed
	}
	resp, err := s.Client.Generate(ctx, GenerateRequest{
		InputIDs: req.InputIDs, SamplingParams: sp,
		ReturnLogprob: req.Logprobs, ReturnRoutedExperts: req.Routing, RoutedExpertsStartLen: req.RoutingStart,
	})
	if err != nil {
		return nil, err
	}
	return fromSGLang(kind, resp, req)
}

// fromSGLang turns a /generate answer into a Generation: an abort finish
// reason or a NaN log-prob is an *AbortError, an unknown finish reason an
// error (never taken for "length").
func fromSGLang(kind string, resp *GenerateResponse, req Request) (*Generation, error) {
	m := resp.MetaInfo
	g := &Generation{Text: resp.Text, OutputIDs: resp.OutputIDs, PromptTokens: m.PromptTokens, CachedTokens: m.CachedTokens,
		Completion: m.CompletionTokens, WeightVersion: m.WeightVersion}
	fr := m.FinishReason
	switch fr["type"] {
	case "length":
		g.Finish.Kind = FinishLength
	case "stop":
		g.Finish.Kind = FinishStop
		switch v := fr["matched"].(type) {
		case float64:
			t := int(v)
			g.Finish.MatchedToken = &t
		case string:
			g.Finish.MatchedText = v
		default:
			return nil, fmt.Errorf("inference %s: finish_reason %v: stop without a matched token or string", kind, fr)
		}
	case "abort":
		return nil, &AbortError{Engine: kind, Reason: fmt.Sprint(fr["message"])}
	default:
		return nil, fmt.Errorf("inference %s: unknown finish_reason %v (expected stop, length or abort)", kind, fr)
	}
	if req.Logprobs {
		var err error
		if g.Logprobs, err = resp.Logprobs(); err != nil {
			var ab *AbortError
			if errors.As(err, &ab) {
				ab.Engine = kind
			}
			return nil, err
		}
		if g.LogprobIDs, err = resp.LogprobTokenIDs(); err != nil {
			return nil, err
		}
	}
	if req.Routing && m.RoutedExperts != "" {
		ids, err := resp.RoutedExperts()
		if err != nil {
			return nil, err
		}
		start := req.RoutingStart
		if m.RoutedStart != nil {
			start = *m.RoutedStart
		}
		// SGLang's layout does not carry its shape: [rows, num_hidden_layers,
		// top_k]; the caller reshapes it with the model's facts.
		g.Routing = &Routing{Start: start, IDs: ids}
	}
	return g, nil
}

// UpdateWeights is /update_weights_from_disk with weight_version: without
// it SGLang keeps reporting "default".
func (s *SGLang) UpdateWeights(ctx context.Context, dir, version string) error {
	return s.UpdateWeightsFromDisk(ctx, dir, version)
}

// sglangServerArgs are the /server_info fields t1flow reads: SGLang's
// ServerArgs dataclass, flattened into the answer.
type sglangServerArgs struct {
	ModelPath     string `json:"model_path"`
	WeightVersion string `json:"weight_version"`
	ContextLength *int   `json:"context_length"`
	RoutedExperts *bool  `json:"enable_return_routed_experts"`
	Dtype         string `json:"dtype"`
}

// Info reads /model_info and /server_info (the deprecated /get_* routes on
// servers that predate them).
func (s *SGLang) Info(ctx context.Context) (ServerInfo, error) {
	var mi struct {
		ModelPath     string `json:"model_path"`
		WeightVersion string `json:"weight_version"`
	}
	if err := s.getEither(ctx, "/model_info", "/get_model_info", &mi); err != nil {
		return ServerInfo{}, err
	}
	var sa sglangServerArgs
	if err := s.getEither(ctx, "/server_info", "/get_server_info", &sa); err != nil {
		return ServerInfo{}, err
	}
	info := ServerInfo{ModelPath: mi.ModelPath, WeightVersion: mi.WeightVersion, RoutingCapture: sa.RoutedExperts,
		CaptureFlag: "--enable-return-routed-experts (server_args.enable_return_routed_experts)", Dtype: sa.Dtype}
	if info.WeightVersion == "" {
		info.WeightVersion = sa.WeightVersion
	}
	if sa.ContextLength != nil {
		info.ContextLen = *sa.ContextLength
	}
	return info, nil
}

// getEither GETs path, and old on a 404 (a server from before the rename).
func (s *SGLang) getEither(ctx context.Context, path, old string, out any) error {
	err := s.do(ctx, http.MethodGet, path, nil, out)
	var se *httpjson.StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return s.do(ctx, http.MethodGet, old, nil, out)
	}
	return err
}

// T1flow is t1flow's own servers (gpu/reference, gpu/hf): SGLang's wire for
// generation and reloads, and /get_model_info with the checkpoint's config
// and chat template. Routing capture is always on.
type T1flow struct{ SGLang }

// Kind is EngineT1flow.
func (t *T1flow) Kind() string { return EngineT1flow }

// Generate is SGLang's /generate.
func (t *T1flow) Generate(ctx context.Context, req Request) (*Generation, error) {
	return t.generate(ctx, t.Kind(), req)
}

// Info reads /get_model_info.
func (t *T1flow) Info(ctx context.Context) (ServerInfo, error) {
	mi, err := t.ModelInfo(ctx)
	if err != nil {
		return ServerInfo{}, err
	}
	on := true
	return ServerInfo{ModelPath: mi.ModelPath, WeightVersion: mi.WeightVersion, ContextLen: mi.BlockSize, RoutingCapture: &on,
		CaptureFlag: "(always on in t1flow's servers)", Dtype: mi.SampleDtype}, nil
}
