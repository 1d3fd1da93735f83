package inference

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestStockVLLMGeneratesAndReloads drives a real stock vLLM (CPU build)
// through the VLLM client: token IDs in and out with log-probs, its model
// info, and an in-place reload that really changes the weights (and one
// back that restores them). It needs a Python with vLLM
// (T1FLOW_VLLM_PYTHON, e.g. /work/envs/hf2/bin/python) and transformers for
// gpu/hf/tiny.py; routed-experts capture does not run on CPU (Model Runner
// V2 needs Triton's CPU backend), so routing is tested against the wire
// fakes only. Give it time: go test -timeout 30m.
func TestStockVLLMGeneratesAndReloads(t *testing.T) {
	py := os.Getenv("T1FLOW_VLLM_PYTHON")
	if py == "" {
		if os.Getenv("T1FLOW_INTEGRATION") == "1" {
			t.Fatal("T1FLOW_VLLM_PYTHON (a Python with vLLM: the hf env, `make hfenv`) is not set; make test sets it")
		}
		t.Skip("T1FLOW_VLLM_PYTHON (a Python with vLLM) is not set")
	}
	_, here, _, _ := runtime.Caller(0)
	tiny := filepath.Join(filepath.Dir(here), "..", "gpu", "hf", "tiny.py")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "seed0"), filepath.Join(dir, "seed1")
	for i, d := range []string{a, b} {
		if out, err := exec.Command(py, tiny, "--arch", "llama", "--out", d, "--seed", fmt.Sprint(i)).CombinedOutput(); err != nil {
			t.Fatalf("tiny.py: %v\n%s", err, out)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// vLLM's CPU start takes about a minute on an idle machine, far more on a loaded one.
	end := time.Now().Add(20 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(end) {
		end = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	// A dense Llama (vLLM's CPU attention has no kernel for the tiny MoE's
	// head_dim 16), with the flags gpu.VLLMCommand starts it with.
	cmd := exec.CommandContext(ctx, py, "-m", "vllm.entrypoints.openai.api_server", "--enforce-eager", "--enable-scale-out",
		"--logprobs-mode", "processed_logprobs", "--dtype", "float32", "--seed", "0",
		"--model", a, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--max-model-len", "1024")
	cmd.Env = append(os.Environ(), "VLLM_SERVER_DEV_MODE=1", "VLLM_CPU_KVCACHE_SPACE=1")
	logf, _ := os.Create(filepath.Join(dir, "vllm.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// vLLM's engine core and workers are child processes: end the group.
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	e, _ := NewEngine(EngineVLLM, fmt.Sprintf("http://127.0.0.1:%d", port), &http.Client{Timeout: 2 * time.Minute})
	for e.Health(ctx) != nil {
		if ctx.Err() != nil {
			b, _ := os.ReadFile(filepath.Join(dir, "vllm.log"))
			t.Fatalf("vLLM did not come up:\n%s", b)
		}
		time.Sleep(2 * time.Second)
	}
	info, err := e.Info(ctx)
	if err != nil || info.ContextLen != 1024 {
		t.Fatalf("info %+v %v", info, err)
	}
	prompt := []int{1, 2, 3, 4, 5, 6, 7, 8}
	seed := int64(7)
	gen := func() *Generation {
		g, err := e.Generate(ctx, Request{InputIDs: prompt, Temperature: 1, MaxNewTokens: 6, Seed: &seed, Logprobs: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(g.OutputIDs) == 0 || len(g.Logprobs) != len(g.OutputIDs) || g.PromptTokens != len(prompt) {
			t.Fatalf("generation %+v", g)
		}
		for i, lp := range g.Logprobs {
			if lp > 0 || math.IsNaN(float64(lp)) || g.LogprobIDs[i] != int32(g.OutputIDs[i]) {
				t.Fatalf("log-prob %d: %v of %d (token %d)", i, lp, g.LogprobIDs[i], g.OutputIDs[i])
			}
		}
		return g
	}
	first := gen()
	if err := e.UpdateWeights(ctx, b, "v1"); err != nil {
		t.Fatal(err)
	}
	other := gen()
	if other.WeightVersion != "v1" || sameLogprobs(first, other) {
		t.Fatalf("after reloading other weights: version %q, log-probs %v then %v", other.WeightVersion, first.Logprobs, other.Logprobs)
	}
	if err := e.UpdateWeights(ctx, a, "v2"); err != nil {
		t.Fatal(err)
	}
	back := gen()
	if !sameLogprobs(first, back) {
		t.Fatalf("reloading the first weights again: %v, first %v", back.Logprobs, first.Logprobs)
	}
}

func sameLogprobs(x, y *Generation) bool {
	if len(x.OutputIDs) != len(y.OutputIDs) {
		return false
	}
	for i := range x.OutputIDs {
		if x.OutputIDs[i] != y.OutputIDs[i] || math.Abs(float64(x.Logprobs[i]-y.Logprobs[i])) > 1e-4 {
			return false
		}
	}
	return true
}
