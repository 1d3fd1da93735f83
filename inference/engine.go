package inference

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Engine kinds, chosen per worker (-inference-engine, T1FLOW_INFERENCE_ENGINE).
const (
	EngineT1flow = "t1flow" // gpu/reference and gpu/hf servers (SGLang's wire, t1flow's model info)
	EngineSGLang = "sglang" // stock SGLang
	EngineVLLM   = "vllm"   // stock vLLM
)

// EngineEnv names the environment variable that picks the engine kind.
const EngineEnv = "T1FLOW_INFERENCE_ENGINE"

// Engine is what the rest of t1flow calls on an inference server: token IDs
// in, token IDs out with per-token log-probs, routed experts, the weight
// version and how generation ended; weights reloaded from a directory under
// a version; health; what the server reports about itself. One
// implementation per engine speaks its wire format as it ships.
type Engine interface {
	Kind() string
	URL() string
	Generate(ctx context.Context, req Request) (*Generation, error)
	// UpdateWeights loads the checkpoint directory dir (on the server's host)
	// and makes version the weight version it reports.
	UpdateWeights(ctx context.Context, dir, version string) error
	Health(ctx context.Context) error
	Info(ctx context.Context) (ServerInfo, error)
}

// Request is one generation.
type Request struct {
	InputIDs     []int
	Temperature  float64
	TopP         float64
	MaxNewTokens int
	StopTokenIDs []int
	Seed         *int64
	Logprobs     bool
	// Routing asks for routed experts of positions [RoutingStart, len-1):
	// every position the engine forwards; the last sampled token has none.
	Routing      bool
	RoutingStart int
}

// Finish is how a generation ended.
type Finish struct {
	Kind         string // FinishStop, FinishLength
	MatchedToken *int   // the stop token, when the engine names it
	MatchedText  string // the stop string, when it stopped on one
}

// Finish kinds. An abort is never a Generation: it is an *AbortError.
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// Generation is one engine answer, normalised.
type Generation struct {
	Text          string
	OutputIDs     []int
	Logprobs      []float32 // one per output token (when asked)
	LogprobIDs    []int32   // the token ID each log-prob is of, as the engine reported it
	PromptTokens  int       // as the engine counted them (0 when it does not say)
	CachedTokens  int       // prompt positions reused from the prefix cache
	Completion    int
	Finish        Finish
	Routing       *Routing // nil when not asked or not returned
	WeightVersion string
}

// Routing is the engine's routed experts: Rows positions starting at Start,
// Layers layers (all of num_hidden_layers as SGLang returns them, or the MoE
// layers only) × TopK expert IDs, flattened row-major.
type Routing struct {
	Start, Rows, Layers, TopK int
	IDs                       []int32
}

// ServerInfo is what the engine reports about itself.
type ServerInfo struct {
	ModelPath     string
	WeightVersion string
	ContextLen    int // 0 when the engine does not say
	// RoutingCapture is whether the engine was launched with routed-experts
	// capture (nil when it does not report its launch flags).
	RoutingCapture *bool
	// CaptureFlag names the launch flag that turns capture on.
	CaptureFlag string
	Dtype       string // the serving dtype, when the engine reports it
}

// AbortError is a generation the engine gave up on (SGLang's abort finish
// reason, a NaN log-prob, vLLM's "abort"/"error"): retryable, never a sample.
type AbortError struct {
	Engine, Reason string
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("inference %s aborted the generation: %s", e.Engine, e.Reason)
}

// ParseEngineKind checks an -inference-engine value ("" is t1flow).
func ParseEngineKind(s string) (string, error) {
	switch k := strings.ToLower(strings.TrimSpace(s)); k {
	case "":
		return EngineT1flow, nil
	case EngineT1flow, EngineSGLang, EngineVLLM:
		return k, nil
	}
	return "", fmt.Errorf("-inference-engine %q: must be one of sglang, vllm, t1flow (or set %s)", s, EngineEnv)
}

// EngineKindFromEnv is the default of -inference-engine.
func EngineKindFromEnv() string {
	if v := os.Getenv(EngineEnv); v != "" {
		return v
	}
	return EngineT1flow
}

// NewEngine makes the client of one server of the given kind.
func NewEngine(kind, url string, hc *http.Client) (Engine, error) {
	k, err := ParseEngineKind(kind)
	if err != nil {
		return nil, err
	}
	c := &Client{BaseURL: strings.TrimRight(url, "/"), HTTP: hc}
	switch k {
	case EngineSGLang:
		return &SGLang{Client: c}, nil
	case EngineVLLM:
		return &VLLM{Client: c}, nil
	}
	return &T1flow{SGLang{Client: c}}, nil
}

// MoERows returns the routing of the MoE layers only, [Rows, len(MoELayers),
// TopK] flattened, the layout a trajectory stores. The engine's layer
// dimension is either every layer (SGLang: num_hidden_layers, dense layers
// zero-filled) or the MoE layers alone; an engine that does not report the
// shape (SGLang) is reshaped with the model's facts.
func (r *Routing) MoERows(f ModelFacts) ([]int32, int, error) {
	if !f.MoE() {
		return nil, 0, fmt.Errorf("routing returned for a dense model (config.json has no experts)")
	}
	k := f.TopK
	if r.TopK != 0 && r.TopK != k {
		return nil, 0, fmt.Errorf("routing has top-%d, config.json says num_experts_per_tok %d", r.TopK, k)
	}
	layers := r.Layers
	if layers == 0 {
		layers = f.Layers
	}
	if layers != f.Layers && layers != len(f.MoELayers) {
		return nil, 0, fmt.Errorf("routing has %d layers; config.json has %d layers of which %d MoE", layers, f.Layers, len(f.MoELayers))
	}
	per := layers * k
	if len(r.IDs)%per != 0 {
		return nil, 0, fmt.Errorf("routing has %d entries, not a whole number of rows of %d layers × top-%d", len(r.IDs), layers, k)
	}
	rows := len(r.IDs) / per
	if r.Rows != 0 && r.Rows != rows {
		return nil, 0, fmt.Errorf("routing shape says %d rows, holds %d", r.Rows, rows)
	}
	if layers == len(f.MoELayers) {
		return r.IDs, rows, nil
	}
	m := len(f.MoELayers)
	out := make([]int32, 0, rows*m*k)
	for p := 0; p < rows; p++ {
		for _, l := range f.MoELayers {
			o := p*per + l*k
			out = append(out, r.IDs[o:o+k]...)
		}
	}
	return out, rows, nil
}

// CheckLaunchFlags checks, at worker start, that an engine was launched
// with routed-experts capture when R3 needs it (an MoE policy), naming the
// flag that is missing; an engine that does not report its flags is refused
// too, since nothing would catch the missing routing before every turn fails.
func CheckLaunchFlags(kind string, info ServerInfo, r3 bool) error {
	if !r3 {
		return nil
	}
	switch {
	case info.RoutingCapture == nil && kind == EngineVLLM:
		return fmt.Errorf("inference vllm: R3 needs routed-experts capture, and the server does not report its config (GET /server_info): start it with VLLM_SERVER_DEV_MODE=1 and --enable-return-routed-experts")
	case info.RoutingCapture == nil:
		return fmt.Errorf("inference %s: R3 needs routed-experts capture, and the server does not report whether it is on (/server_info): launch it with %s", kind, info.CaptureFlag)
	case !*info.RoutingCapture:
		return fmt.Errorf("inference %s: R3 needs routed-experts capture, which is off: launch the server with %s", kind, info.CaptureFlag)
	}
	return nil
}
