package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/harness"
	inf "github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestCampaignOnTheHFBackend runs a short campaign end to end on the
// Hugging Face backend (gpu/hf): a tiny random Qwen3-MoE checkpoint with its
// own tokenizer and ChatML template, served and trained by the hf processes a
// GPU worker supervises (-gpu-backend hf -model DIR). SFT, its checkpoint
// eval, critic warm-up and one PPO step all go through the same workflows as
// the reference; the harness renders every prompt from the server's "chat"
// template, and the trajectories carry the model's routing.
func TestCampaignOnTheHFBackend(t *testing.T) { hfCampaign(t, 0) }

// TestCampaignOnTwoHFTrainerRanks is the same campaign with the trainer as 2
// ranks under torchrun (gpu/hf/sharded.py, FSDP2 over gloo): every trainer
// operation the workflows call, the reload probe (/score) too, runs on both.
func TestCampaignOnTwoHFTrainerRanks(t *testing.T) { hfCampaign(t, 2) }

// hfCampaign runs the campaign with the trainer as ranks processes under
// torchrun (0: one process, no torchrun).
func hfCampaign(t *testing.T, ranks int) {
	if !testenv.Required() {
		t.Skip("the hf backend's campaign runs with T1FLOW_INTEGRATION=1 (make test)")
	}
	model := testenv.HFTinyModel(t, "qwen3_moe")
	// The model's facts as the rollouts read them (transformers 5 writes
	// Qwen3-MoE's expert count as num_local_experts).
	b, err := os.ReadFile(filepath.Join(model, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	mc, err := inf.FactsFromConfig("tiny qwen3_moe config.json", b)
	if err != nil || mc.Layers == 0 || mc.Experts == 0 {
		t.Fatalf("tiny model config: %v %+v", err, mc)
	}
	r := newRig(t, true)
	home := t.TempDir()
	start := time.Now()
	l := testenv.GPUWorkerWith(t, r.c, r.st, gpu.LocalOptions{Home: home, Backend: gpu.BackendHF, Init: model, ServerArgs: []string{"--threads", "1"},
		TrainerRanks: ranks})
	t.Logf("hf processes healthy in %v", time.Since(start).Round(time.Millisecond))
	info, err := l.Acts.Inference.ModelInfo(context.Background())
	if err != nil || info.Chat == nil || info.Chat.EndOfTurnID == nil || info.Chat.TurnSeparator != "\n" || info.NumLayers != mc.Layers || info.TopK != mc.TopK || info.NumExperts != mc.Experts {
		t.Fatalf("hf server model info %+v (chat %+v): %v; config.json %+v", info, info.Chat, err, mc)
	}
	r.pools(t)
	name := fmt.Sprintf("hf%d", time.Now().UnixNano()%1e9)
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
	if st.Phase != workflows.PhaseDone || st.Step != 1 || len(st.Steps) != 1 || st.ColdEV == nil || st.Checkpoint == nil {
		t.Fatalf("campaign state: phase %s, step %d, %d step records, cold EV %v, checkpoint %v", st.Phase, st.Step, len(st.Steps), st.ColdEV, st.Checkpoint)
	}
	step := st.Steps[0]
	if step.Trained < 1 || step.Rollouts != 2 || step.Metrics["policy_loss"] == nil {
		t.Errorf("PPO step: %+v", step)
	}
	if len(st.Evals) != 1 || st.Evals[0].Label != "sft" || st.Evals[0].Summary.Rollouts != 2 {
		t.Fatalf("evals %+v, want the SFT checkpoint's eval of 2 rollouts", st.Evals)
	}
	// The trainer's versions advanced (SFT, then warm-up and PPO on top), and
	// the server serves the checkpoint of the PPO step.
	sft, ppo := st.Evals[0].WeightVersion, st.Checkpoint.WeightVersion
	if sft == "" || step.PolicyVersion == "" || sft == ppo || step.PolicyVersion == ppo {
		t.Errorf("weight versions: SFT %q, sampled PPO step %q, after the step %q", sft, step.PolicyVersion, ppo)
	}
	if now, err := l.Acts.Inference.ModelInfo(context.Background()); err != nil || now.WeightVersion != ppo {
		t.Errorf("the hf server serves %q after the campaign, want the step's checkpoint %q (%v)", now.WeightVersion, ppo, err)
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(context.Background(), r.st, st.Evals[0].Report, &rep); err != nil {
		t.Fatal(err)
	}
	checkHFRollouts(t, r, rep.Rollouts, l.Acts.Inference)
	// The campaign's random init started from -model, not random weights.
	if log := readFile(filepath.Join(home, "gpu", "trainer", "ops.log")); !strings.Contains(log, "load "+model+" version=0") {
		t.Errorf("the campaign's init did not load -model %s:\n%s", model, log)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

// checkHFRollouts reads an eval's rollouts: each trajectory is what the
// sampler saw and emitted (TITO drift 0), in the HF template's tokens (its
// end-of-turn ID closes the system and user turns), with routing of the
// model's shape at every position.
func checkHFRollouts(t *testing.T, r *rig, rollouts []workflows.RolloutResult, c *inf.Client) {
	t.Helper()
	ctx := context.Background()
	info, err := c.ModelInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chat := info.Chat
	// The context starts with the system turn and opens the user turn in
	// the checkpoint's template; after a turn the sampler ended with its end
	// of turn, the glue opens the next user turn right away.
	opening, err1 := c.Tokenize(ctx, chat.SystemPrefix+harness.SystemPrompt+chat.EndOfTurn+chat.TurnSeparator+chat.UserPrefix, false)
	next, err2 := c.Tokenize(ctx, chat.TurnSeparator+chat.UserPrefix, false)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for _, ro := range rollouts {
		rec := r.record(t, ro)
		ep := rec.Episode
		if ep == nil || ro.Trajectory == nil {
			t.Fatalf("%s: no trajectory (%s)", ro.RolloutID, ro.Error)
		}
		if !ep.Routing.Valid || ep.Routing.Covered != ep.Tokens-1 || ep.Routing.Layers != info.NumLayers || ep.Routing.TopK != info.TopK || ep.StitchCases["initial"] != 1 {
			t.Errorf("%s: routing %+v, stitches %v", ro.RolloutID, ep.Routing, ep.StitchCases)
		}
		if ep.Drift.PromptMismatches != 0 || ep.Drift.LossMismatches != 0 {
			t.Errorf("%s: TITO drift %+v", ro.RolloutID, ep.Drift)
		}
		b, err := r.st.Get(context.Background(), *ro.Trajectory)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := safetensors.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		toks, re := ts["tokens"], ts["routed_experts"]
		ids, err := toks.AsInt32()
		if err != nil {
			t.Fatal(err)
		}
		if !startsWith(ids, opening) {
			t.Errorf("%s: the context does not open with the template's system turn (%d tokens, first difference at %d)", ro.RolloutID, len(opening), firstDiff(ids, opening))
		}
		eots := 0
		mask := ts["loss_mask"].Data
		for i, id := range ids {
			if int(id) != *chat.EndOfTurnID {
				continue
			}
			eots++
			if mask[i] == 1 && i+1 < len(ids) && !startsWith(ids[i+1:], next) {
				t.Errorf("%s: after the sampled end of turn at %d: %v, want the user turn %v", ro.RolloutID, i, ids[i+1:min(len(ids), i+1+len(next))], next)
			}
		}
		t.Logf("%s: %d turns, %d tokens (%d learned), stitches %v, %d end-of-turn tokens", ro.RolloutID, ro.Turns, ep.Tokens, ep.LossTokens, ep.StitchCases, eots)
		// T−1 routing rows: the last sampled token was never routed.
		if eots < 2 || re.Shape[0] != toks.Shape[0]-1 || re.Shape[1] != info.NumLayers || re.Shape[2] != info.TopK {
			t.Errorf("%s: %d end-of-turn tokens (id %d) in %v tokens; routing %v", ro.RolloutID, eots, *info.Chat.EndOfTurnID, toks.Shape, re.Shape)
		}
	}
}

func startsWith(ids []int32, prefix []int) bool {
	if len(ids) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		if int(ids[i]) != p {
			return false
		}
	}
	return true
}

func firstDiff(ids []int32, want []int) int {
	for i := range want {
		if i >= len(ids) || int(ids[i]) != want[i] {
			return i
		}
	}
	return len(want)
}
