package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// fakeEngine reloads into version and samples the probe with log-probs
// skew away from the trainer's (a wrong reload when skew is large).
type fakeEngine struct {
	version, reports string
	loads            []string
	skew             float32
	dtype            string
}

func (f *fakeEngine) Kind() string { return inference.EngineSGLang }
func (f *fakeEngine) URL() string  { return "http://engine" }
func (f *fakeEngine) Generate(_ context.Context, req inference.Request) (*inference.Generation, error) {
	return &inference.Generation{OutputIDs: []int{9, 10}, Logprobs: []float32{-1 + f.skew, -2}, Finish: inference.Finish{Kind: inference.FinishLength}}, nil
}
func (f *fakeEngine) UpdateWeights(_ context.Context, dir, version string) error {
	f.loads = append(f.loads, dir)
	f.version = version
	return nil
}
func (f *fakeEngine) Health(context.Context) error { return nil }
func (f *fakeEngine) Info(context.Context) (inference.ServerInfo, error) {
	v := f.version
	if f.reports != "" {
		v = f.reports
	}
	return inference.ServerInfo{WeightVersion: v, Dtype: f.dtype}, nil
}

// fakeScorer is a trainer whose /score gives log-probs -1, -2 for the two
// sampled tokens after the 8-token probe, at weight version v.
func fakeScorer(t *testing.T, v string) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Tokens []int `json:"tokens"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		lps := make([]float64, len(in.Tokens)-1)
		lps[len(lps)-2], lps[len(lps)-1] = -1, -2
		json.NewEncoder(w).Encode(map[string]any{"logprobs": lps, "weight_version": v})
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL)
}

func TestReloadIsVerifiedOnTheProbe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := &Activities{Trainer: fakeScorer(t, "v3"), WorkDir: dir}
	good := &fakeEngine{dtype: "float32", skew: 1e-5}
	a.Engine = good
	if err := a.loadVerified(ctx, good, "/ck/v3", "v3"); err != nil {
		t.Fatalf("a right reload: %v", err)
	}
	if _, ok := a.lastServed(); ok {
		t.Fatal("/ck/v3 is not on disk: it must not be offered for reapplying")
	}
	// The measured failure: experts wrong after a reload, log-probs off by 0.18.
	wrong := &fakeEngine{dtype: "bfloat16", skew: 0.18}
	err := a.loadVerified(ctx, wrong, "/ck/v3", "v3")
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.Infra || ae.NonRetryable() || !strings.Contains(err.Error(), "reload is wrong") {
		t.Fatalf("a wrong reload: %v, want a retryable InfraError", err)
	}
	// Float32 engines are held to float noise.
	if err := a.loadVerified(ctx, &fakeEngine{dtype: "float32", skew: 0.01}, "/ck/v3", "v3"); err == nil {
		t.Fatal("a float32 engine 0.01 off passed")
	}
	// An engine that keeps reporting its old version did not load.
	if err := a.loadVerified(ctx, &fakeEngine{reports: "default"}, "/ck/v3", "v3"); err == nil || !strings.Contains(err.Error(), "serves default") {
		t.Fatalf("stale version: %v", err)
	}
	// A checkpoint other than the trainer's is checked by its version only.
	if err := a.loadVerified(ctx, &fakeEngine{skew: 0.5}, "/ck/v1", "v1"); err != nil {
		t.Fatalf("an old checkpoint: %v", err)
	}
}

func TestServingDirHoldsThePolicyOnly(t *testing.T) {
	for name, want := range map[string]bool{"model.safetensors": true, "config.json": true, "tokenizer.json": true, "t1flow.json": true,
		"model-00001-of-00002.safetensors": true, "critic.safetensors": false, "optim.pt": false, "manifest.json": false} {
		if servedFile(name) != want {
			t.Errorf("%s: served %v, want %v", name, !want, want)
		}
	}
}

func TestRestartedEngineGetsTheVerifiedCheckpoint(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	ck := filepath.Join(work, "ck.serve")
	os.MkdirAll(ck, 0o755)
	e := &fakeEngine{}
	a := &Activities{Trainer: fakeScorer(t, "v2"), WorkDir: work, Engine: e}
	if err := a.loadVerified(ctx, e, ck, "v2"); err != nil {
		t.Fatal(err)
	}
	e.version = "default" // the engine restarted on its launch weights
	info, err := a.InferenceInfo(ctx)
	if err != nil || info.WeightVersion != "v2" || e.version != "v2" || len(e.loads) != 2 || e.loads[1] != ck {
		t.Fatalf("after a restart: %+v %v, loads %v", info, err, e.loads)
	}
}
