package workflows_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	inf "github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

// TestPPOStepOnStockVLLM is one PPO step end to end against stock vLLM (the
// CPU build in the hf env), as `-gpu-backend hf -inference-engine vllm`
// runs it: the gpu role starts vLLM serving a tiny dense Llama (vLLM's CPU
// attention has no kernel for the tiny MoE's head_dim 16), the sandbox
// role's rollouts sample it with the chat template and tokenizer of the
// model-files sidecar, and the campaign trains them (SFT, warm-up, one PPO
// step) and reloads every checkpoint into vLLM, verified against the
// trainer's log-probs on the probe. Checked: the tokens vLLM sampled are the
// tokens trained (TITO drift 0, no routing for a dense model), and vLLM
// ends serving the PPO step's weights (its probe's log-probs are the
// trainer's).
func TestPPOStepOnStockVLLM(t *testing.T) {
	if !testenv.Required() {
		t.Skip("stock vLLM's PPO step runs with T1FLOW_INTEGRATION=1 (make test)")
	}
	// Tied as SmolLM2 is: on CPU vLLM serves it untied (gpu/untied.go),
	// and a reload that left the LM head at the launch weights fails the
	// probe at vLLM's 2e-3, so this campaign could not finish.
	model := testenv.HFTinyModel(t, "llama-tied")
	r := newRig(t, false)
	home := t.TempDir()
	start := time.Now()
	l := testenv.GPUWorkerWith(t, r.c, r.st, gpu.LocalOptions{Home: home, Backend: gpu.BackendHF, Init: model,
		InferenceEngine: inf.EngineVLLM, ServerArgs: []string{"--max-model-len", "1024"}})
	t.Logf("trainer, vLLM and sidecar healthy in %v", time.Since(start).Round(time.Second))
	if !l.Acts.UntieHead || l.Acts.ProbeTolerance != 2e-3 {
		t.Fatalf("vLLM on CPU with a tied model: untie head %v, probe tolerance %g", l.Acts.UntieHead, l.Acts.ProbeTolerance)
	}
	if l.ModelFiles == nil || l.Acts.Engine == nil || l.Acts.Engine.Kind() != inf.EngineVLLM {
		t.Fatalf("the gpu role runs no model-files sidecar or no vLLM client: %+v", l)
	}
	if cmd := readFile(filepath.Join(home, "logs", "inference.log")); !strings.Contains(cmd, "vllm.entrypoints.openai.api_server") {
		t.Fatalf("the local server is not stock vLLM:\n%s", cmd[:min(len(cmd), 2000)])
	}
	testenv.Worker(t, r.c, roles.Control+","+roles.Sandbox, &activities.Activities{
		Docker: testenv.Docker(t), Store: r.st, Temporal: r.c, Host: r.host, TaskCache: filepath.Join(r.dir, "cache"),
		InferenceEngine: inf.EngineVLLM, ModelFiles: l.ModelFiles.URL(),
	})
	r.pools(t)
	name := fmt.Sprintf("vllm%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.Eval.Base, cfg.Eval.AtEnd, cfg.PPO.Steps = false, false, 1
	run := startCampaign(t, r.c, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := run.Get(ctx, &res); err != nil {
		r.explain(t, name)
		t.Fatal(err)
	}
	t.Logf("campaign done in %v", time.Since(start).Round(time.Second))
	st := res.State
	if st.Phase != workflows.PhaseDone || st.Step != 1 || len(st.Steps) != 1 || st.Checkpoint == nil || len(st.Evals) != 1 {
		t.Fatalf("campaign state: phase %s, step %d, %d step records, checkpoint %v, evals %v", st.Phase, st.Step, len(st.Steps), st.Checkpoint, st.Evals)
	}
	step := st.Steps[0]
	if step.Trained < 1 || step.Rollouts != 2 || step.Metrics["policy_loss"] == nil {
		t.Errorf("PPO step: %+v", step)
	}
	sft, ppo := st.Evals[0].WeightVersion, st.Checkpoint.WeightVersion
	if sft == "" || step.PolicyVersion == "" || sft == ppo || step.PolicyVersion == ppo {
		t.Errorf("weight versions: SFT %q, sampled PPO step %q, after the step %q", sft, step.PolicyVersion, ppo)
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(ctx, r.st, st.Evals[0].Report, &rep); err != nil {
		t.Fatal(err)
	}
	checkVLLMRollouts(t, r, rep.Rollouts)
	checkServesTrainer(ctx, t, l, ppo)
}

// checkVLLMRollouts: every rollout vLLM sampled has a trajectory whose
// tokens are the sampled ones (drift 0), learned tokens, and no routing.
func checkVLLMRollouts(t *testing.T, r *rig, rollouts []workflows.RolloutResult) {
	t.Helper()
	if len(rollouts) != 2 {
		t.Fatalf("%d rollouts, want 2", len(rollouts))
	}
	for _, ro := range rollouts {
		rec := r.record(t, ro)
		ep := rec.Episode
		if ep == nil || ro.Trajectory == nil {
			t.Fatalf("%s: no trajectory (%s)", ro.RolloutID, ro.Error)
		}
		if ep.Drift.PromptMismatches != 0 || ep.Drift.LossMismatches != 0 || ep.LossTokens == 0 {
			t.Errorf("%s: TITO drift %+v, %d learned tokens", ro.RolloutID, ep.Drift, ep.LossTokens)
		}
		b, err := r.st.Get(context.Background(), *ro.Trajectory)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := safetensors.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ts["routed_experts"]; ok {
			t.Errorf("%s: a dense model's trajectory carries routing %v", ro.RolloutID, ts["routed_experts"].Shape)
		}
		t.Logf("%s: %d turns, %d tokens (%d learned), drift %+v", ro.RolloutID, ro.Turns, ep.Tokens, ep.LossTokens, ep.Drift)
	}
}

// checkServesTrainer: vLLM reports the PPO step's version, and its
// log-probs of a sample are the trainer's (holding that version) to float32
// noise: the reload put the trained weights in.
func checkServesTrainer(ctx context.Context, t *testing.T, l *gpu.Local, version string) {
	t.Helper()
	e := l.Acts.Engine
	info, err := e.Info(ctx)
	if err != nil || info.WeightVersion != version {
		t.Fatalf("vLLM serves %q after the campaign, want the step's checkpoint %q (%v)", info.WeightVersion, version, err)
	}
	prompt := []int{5, 9, 17, 33, 65, 129}
	seed := int64(11)
	g, err := e.Generate(ctx, inf.Request{InputIDs: prompt, Temperature: 1, MaxNewTokens: 8, Seed: &seed, Logprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	lps, tv, err := l.Acts.Trainer.Score(ctx, append(append([]int{}, prompt...), g.OutputIDs...), nil, 1)
	if err != nil || tv != version {
		t.Fatalf("trainer score: version %q (want %q): %v", tv, version, err)
	}
	gap := 0.0
	for i, lp := range g.Logprobs {
		gap = math.Max(gap, math.Abs(float64(lp)-lps[len(prompt)-1+i]))
	}
	if gap > 1e-3 {
		t.Errorf("vLLM's log-probs are up to %.4g from the trainer's at version %s: it does not serve the trained weights", gap, version)
	}
	t.Logf("vLLM at %s: %d sampled tokens, largest log-prob gap to the trainer %.2g", version, len(g.OutputIDs), gap)
}
