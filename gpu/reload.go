package gpu

// Reload verification: an engine that reports the new weight version is not
// trusted to serve the new weights (vLLM's reload_weights was measured to
// leave an MoE's experts wrong, log-probs off by up to 0.18). After every
// reload the engine samples a fixed probe, and the trainer scores the same
// tokens (its routing replayed): a gap past the dtype's tolerance fails the
// load retryably, so it is retried and never sampled from.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// probeTokens is the fixed probe: small IDs, valid in every vocabulary.
var probeTokens = []int{1, 2, 3, 4, 5, 6, 7, 8}

const probeSeed = 20260701

// Tolerances of the probe's largest log-prob gap, by serving dtype: float32
// engines agree with the trainer to float noise; half-precision ones differ
// by rounding, well under a wrong expert's effect.
const (
	probeTolFloat32 = 1e-3
	probeTolHalf    = 0.1
)

// loadVerified has one engine load dir under version, checks it reports
// that version, and verifies its log-probs on the probe.
func (a *Activities) loadVerified(ctx context.Context, e inference.Engine, dir, version string) error {
	if err := e.UpdateWeights(ctx, dir, version); err != nil {
		return classify(fmt.Errorf("%s: load %s: %w", e.URL(), dir, err))
	}
	info, err := e.Info(ctx)
	if err != nil {
		return classify(fmt.Errorf("%s: %w", e.URL(), err))
	}
	if info.WeightVersion != version {
		return errs.Infraf("%s serves %s after loading %s (%s)", e.URL(), info.WeightVersion, dir, version)
	}
	if err := a.verifyProbe(ctx, e, info, dir, version); err != nil {
		return err
	}
	a.rememberServed(e, dir, version)
	return nil
}

// verifyProbe compares the engine's log-probs of its own probe sample with
// the trainer's. It runs when the trainer holds the same weights (the
// version it reports is the checkpoint's: the load right after a save);
// a checkpoint other than the trainer's (an eval of an old one) is checked
// by its version only.
func (a *Activities) verifyProbe(ctx context.Context, e inference.Engine, info inference.ServerInfo, dir, version string) error {
	if a.Trainer == nil {
		return nil
	}
	capture := info.RoutingCapture != nil && *info.RoutingCapture
	seed := int64(probeSeed)
	g, err := e.Generate(ctx, inference.Request{InputIDs: probeTokens, Temperature: 1, MaxNewTokens: 4, Seed: &seed,
		Logprobs: true, Routing: capture})
	if err != nil {
		return errs.Infraf("%s: reload probe: %v", e.URL(), err)
	}
	var routing [][][]int32
	if g.Routing != nil {
		f, err := a.probeFacts(ctx, e, dir)
		if err != nil {
			return err
		}
		if f.MoE() {
			ids, rows, err := g.Routing.MoERows(f)
			if err != nil {
				return errs.Infraf("%s: reload probe routing: %v", e.URL(), err)
			}
			routing = nest(ids, rows, len(f.MoELayers), f.TopK)
		}
	}
	tokens := append(append([]int{}, probeTokens...), g.OutputIDs...)
	lps, tv, err := a.Trainer.Score(ctx, tokens, routing, 1)
	if err != nil {
		return classify(err)
	}
	if tv != version {
		return nil // the trainer holds other weights: nothing to compare with
	}
	tol := a.probeTolerance(info)
	gap := 0.0
	for i, lp := range g.Logprobs {
		j := len(probeTokens) - 1 + i
		if j >= len(lps) {
			return errs.Infraf("%s: reload probe: trainer scored %d tokens, engine sampled %d", e.URL(), len(lps), len(g.Logprobs))
		}
		gap = math.Max(gap, math.Abs(float64(lp)-lps[j]))
	}
	if gap > tol {
		return errs.Infraf("%s: after loading %s (%s) its log-probs on the probe are up to %.4g from the trainer's (tolerance %.2g for %s): the reload is wrong; retrying",
			e.URL(), dir, version, gap, tol, dtypeName(info.Dtype))
	}
	return nil
}

func (a *Activities) probeTolerance(info inference.ServerInfo) float64 {
	if a.ProbeTolerance > 0 {
		return a.ProbeTolerance
	}
	if info.Dtype == "float32" || info.Dtype == "fp32" {
		return probeTolFloat32
	}
	return probeTolHalf
}

func dtypeName(d string) string {
	if d == "" {
		return "an unreported dtype"
	}
	return d
}

// probeFacts reads the model facts for the probe's routing: the loaded
// directory's config.json, or t1flow's servers' own report of it.
func (a *Activities) probeFacts(ctx context.Context, e inference.Engine, dir string) (inference.ModelFacts, error) {
	p := filepath.Join(dir, "config.json")
	if b, err := os.ReadFile(p); err == nil {
		f, err := inference.FactsFromConfig(p, b)
		if err != nil {
			return f, errs.BadInputf("%v", err)
		}
		return f, nil
	}
	mi, err := (&inference.Client{BaseURL: e.URL(), HTTP: a.httpClient()}).ModelInfo(ctx)
	if err != nil {
		return inference.ModelFacts{}, classify(err)
	}
	f, err := inference.FactsFromConfig(e.URL()+"/get_model_info config", mi.Config)
	if err != nil {
		return f, errs.BadInputf("%v", err)
	}
	return f, nil
}

// nest reshapes flat [rows, layers, k] IDs for the trainer's JSON.
func nest(ids []int32, rows, layers, k int) [][][]int32 {
	out := make([][][]int32, rows)
	for p := range out {
		out[p] = make([][]int32, layers)
		for l := range out[p] {
			o := (p*layers + l) * k
			out[p][l] = ids[o : o+k]
		}
	}
	return out
}
