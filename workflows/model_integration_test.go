package workflows_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// inference starts the reference inference server for a test.
func inference(t *testing.T, args ...string) *gpu.Supervisor {
	t.Helper()
	if err := exec.Command(gpu.Python(), "-c", "import torch").Run(); err != nil {
		if testenv.Required() {
			t.Fatalf("%s cannot import torch", gpu.Python())
		}
		t.Skip("no PyTorch")
	}
	s := &gpu.Supervisor{Name: "inference", Command: gpu.InferenceCommand("", gpu.Slot{}, append([]string{"--threads", "1"}, args...)...),
		LogPath: filepath.Join(t.TempDir(), "inference.log")}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (r *rig) record(t *testing.T, ro workflows.RolloutResult) workflows.RolloutRecord {
	t.Helper()
	var rec workflows.RolloutRecord
	if ro.Record == nil {
		t.Fatalf("%s: no record (%s)", ro.RolloutID, ro.Error)
	}
	if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestPolicyRolloutTrajectoryTrainsInPPO(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "0")
	refs := r.load(t, "../examples/tasks/log-level-counter")
	agent := activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 48, Temperature: 1}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 3}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.Outcome != workflows.OutcomeUnresolved || !ro.Scored || ro.Turns != 3 || ro.AgentEnd != workflows.AgentEndTurnCap {
		t.Fatalf("a random policy: %s, %d turns, end %s (%s)", ro.Outcome, ro.Turns, ro.AgentEnd, ro.Error)
	}
	rec := r.record(t, ro)
	ep := rec.Episode
	if ep == nil || ro.Trajectory == nil {
		t.Fatalf("no trajectory in %+v", rec)
	}
	// A random byte model writes garbage: every turn got a corrective observation.
	if ep.ParseErrors != 3 {
		t.Errorf("%d parse errors in 3 turns of a random model", ep.ParseErrors)
	}
	// The loss region is exact; re-encoding the rendered text would not be (a
	// random byte model emits bytes that do not survive decoding), which is
	// what TITO avoids: reported, not trained on.
	if ep.Drift.LossMismatches != 0 || ep.Drift.PromptMismatches != 0 || ep.Drift.Drift != 0 || ep.Drift.ReencodedContextShare < 0 || ep.Drift.ReencodedContextShare > 0.5 {
		t.Errorf("TITO drift: %+v", ep.Drift)
	}
	t.Logf("re-encoded context share %.3f", ep.Drift.ReencodedContextShare)
	if !ep.Routing.Valid || ep.Routing.Covered != ep.Tokens-1 || ep.StitchCases["initial"] != 1 {
		t.Errorf("routing %+v, stitches %v", ep.Routing, ep.StitchCases)
	}
	// Read the artifact itself: the loss region is exactly the sampled tokens,
	// and routing covers every position but the last sampled token (T−1 rows).
	b, err := r.st.Get(context.Background(), *ro.Trajectory)
	if err != nil {
		t.Fatal(err)
	}
	ts, meta, err := safetensors.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	sampled := 0
	for _, tr := range rec.Turns {
		sampled += tr.Tokens
	}
	mask := ts["loss_mask"].Data
	loss := 0
	for _, m := range mask {
		loss += int(m)
	}
	re := ts["routed_experts"]
	if loss != sampled || loss != ep.LossTokens || re.DType != "U8" || re.Shape[0] != len(mask)-1 || re.Shape[1] != 4 || re.Shape[2] != 2 {
		t.Fatalf("trajectory: %d loss tokens, %d sampled; routing %s %v for %d positions", loss, sampled, re.DType, re.Shape, len(mask))
	}
	if meta["rollout_id"] != ro.RolloutID || ro.PolicyVersions[0] != "random-0" {
		t.Errorf("metadata %v, policy versions %v", meta, ro.PolicyVersions)
	}

	// The trajectory loads in the reference trainer's ppo_step, routing and all.
	tr := &gpu.Supervisor{Name: "trainer", Command: gpu.TrainerCommand(filepath.Join(r.dir, "trainer"), gpu.Slot{}, "--seed", "0", "--threads", "1"),
		LogPath: filepath.Join(r.dir, "trainer.log")}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	gacts := &gpu.Activities{Trainer: gpu.NewClient(tr.URL()), Store: r.st, WorkDir: filepath.Join(r.dir, "gpu")}
	m, err := gacts.TrainerPPOStep(context.Background(), gpu.TrainInput{Key: "t/ppo/1", Preset: "small",
		Trajectories: []gpu.TrajectoryRef{{Trajectory: *ro.Trajectory, Reward: ro.Reward, PolicyVersion: ro.PolicyVersions[0]}}})
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := m.Float("logprob_gap_replay"); g > 1e-3 {
		t.Errorf("the trainer does not reproduce the sampler on this trajectory: gap %v", g)
	}
	if tk, _ := m.Float("tokens"); int(tk) != loss {
		t.Errorf("trainer saw %v loss tokens, the trajectory has %d", tk, loss)
	}
}

func TestMissingRoutingAbortsRetriesAndCounts(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "0", "--drop-routing-frac", "0.6", "--fault-seed", "7")
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/sort-photos-by-date", "../examples/tasks/csv-revenue-report")
	agent := activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 16, Temperature: 1}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 3, Concurrency: 3}), 10*time.Minute)
	if len(rep.Rollouts) != len(refs) {
		t.Fatalf("%d rollouts for %d tasks: some went missing", len(rep.Rollouts), len(refs))
	}
	total, retried, aborted := 0, 0, 0
	for _, ro := range rep.Rollouts {
		total += ro.SandboxAttempts
		if ro.SandboxAttempts > 1 {
			retried++
		}
		switch ro.Outcome {
		case workflows.OutcomeAborted:
			aborted++
			if ro.Scored || ro.Reward != 0 || !strings.Contains(ro.Error, "RoutingMissing") || ro.SandboxAttempts != 3 {
				t.Errorf("aborted rollout %s: scored %v, %d sandboxes, error %q", ro.Name, ro.Scored, ro.SandboxAttempts, ro.Error)
			}
		case workflows.OutcomeUnresolved:
			if ro.Trajectory == nil {
				t.Errorf("%s finished without a trajectory", ro.Name)
			}
		default:
			t.Errorf("%s: unexpected outcome %s (%s)", ro.Name, ro.Outcome, ro.Error)
		}
	}
	if retried == 0 {
		t.Fatal("with 60% of routing dropped, some rollout should have needed a fresh sandbox")
	}
	s := rep.Summary
	sum := 0
	for _, n := range s.Outcomes {
		sum += n
	}
	if sum != len(refs) || s.Outcomes[workflows.OutcomeAborted] != aborted || s.Scored != len(refs)-aborted {
		t.Fatalf("totals do not add up: %+v (aborted %d)", s, aborted)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

func TestContextLimitEndsEpisode(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "1")
	refs := r.load(t, "../examples/tasks/log-level-counter")
	agent := activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 32, Temperature: 1, MaxContext: 1800}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 40}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.AgentEnd != workflows.AgentEndContextExhausted || !ro.Scored || ro.Turns == 0 || ro.Turns >= 40 {
		t.Fatalf("want a scored episode ended by context_exhausted, got %s after %d turns (%s, %s)", ro.AgentEnd, ro.Turns, ro.Outcome, ro.Error)
	}
	rec := r.record(t, ro)
	if rec.Episode.Tokens > 1800 {
		t.Fatalf("the trajectory has %d tokens, over the 1800-token context", rec.Episode.Tokens)
	}
}

func TestChatAgentAgainstOpenAICompatibleServer(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "2")
	refs := r.load(t, "../examples/tasks/log-level-counter")
	os.Setenv("T1FLOW_TEST_CHAT_KEY", "sk-test")
	agent := activities.AgentSpec{Kind: activities.AgentChat, Endpoint: inf.URL(), Model: "reference", APIKeyEnv: "T1FLOW_TEST_CHAT_KEY", MaxNewTokens: 24, Temperature: 1}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 2}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if !ro.Scored || ro.Turns != 2 || ro.Trajectory != nil {
		t.Fatalf("chat rollout: scored %v, %d turns, trajectory %v (%s)", ro.Scored, ro.Turns, ro.Trajectory, ro.Error)
	}
	rec := r.record(t, ro)
	if rec.Episode == nil || rec.Episode.ParseErrors != 2 {
		b, _ := json.Marshal(rec.Episode)
		t.Fatalf("episode %s", b)
	}
}
