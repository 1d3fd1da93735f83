package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// TestPolicyHandsOffTheContextAndItsSegmentsTrain: the reference policy
// (bytes as tokens) on Terminus-2 with a 6,144-token context and a
// 3,000-token handoff threshold. Turn 0's prompt alone leaves less than
// that, so turn 1 hands off as Terminus2._summarize does: a summary in the
// old context, questions in a fresh one, answers in the old one, then the
// turn's reply in a new context opened by the first prompt, the question
// request and the questions. Every reply of a random policy is cut at 16
// tokens and answered in the same turn. The three contexts are three
// trajectories, each audited against what its sampler saw (drift 0), and
// one PPO step on the reference trainer takes all three.
func TestPolicyHandsOffTheContextAndItsSegmentsTrain(t *testing.T) {
	if _, err := os.Stat(harbor.Python()); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") == "" {
			t.Skipf("no Harbor env at %s (make harborenv)", harbor.Python())
		}
		t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", harbor.Python())
	}
	spec, err := harbor.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, true)
	inf := inference(t, "--seed", "0", "--block-size", "6144")
	refs := r.load(t, "../examples/tasks/sort-photos-by-date")
	agent := activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, Harness: harness.Terminus2,
		MaxNewTokens: 16, Temperature: 1, HandoffTokens: 3000}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 2}), 10*time.Minute)
	ro := rep.Rollouts[0]
	if !ro.Scored || ro.Turns != 2 || ro.AgentEnd != workflows.AgentEndTurnCap || ro.Trajectory == nil {
		t.Fatalf("rollout: scored %v, %d turns, end %s, trajectory %v (%s)", ro.Scored, ro.Turns, ro.AgentEnd, ro.Trajectory, ro.Error)
	}
	ep := r.record(t, ro).Episode
	if ep.Handoffs != 1 || len(ro.Segments) != 2 {
		t.Fatalf("%d handoffs, %d more segments; want 1 handoff: the questions' context and the continuing one", ep.Handoffs, len(ro.Segments))
	}
	if ep.Drift.PromptMismatches != 0 || ep.Drift.LossMismatches != 0 || ep.Drift.Drift != 0 || ep.StitchCases["initial"] != 3 {
		t.Fatalf("drift %+v, stitches %v", ep.Drift, ep.StitchCases)
	}
	read := func(ref store.Ref) (string, int, int) {
		b, err := r.st.Get(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := safetensors.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		var text []byte
		for i := 0; i+4 <= len(ts["tokens"].Data); i += 4 {
			if id := ts["tokens"].Data[i]; ts["tokens"].Data[i+1] == 0 && id < 255 {
				text = append(text, id) // the reference tokenizer's IDs below 256 are bytes
			}
		}
		loss := 0
		for _, m := range ts["loss_mask"].Data {
			loss += int(m)
		}
		if re := ts["routed_experts"]; re.Shape[0] != len(ts["loss_mask"].Data)-1 {
			t.Errorf("%s: routing rows %v for %d tokens", ref.URI, re.Shape, len(ts["loss_mask"].Data))
		}
		return string(text), len(ts["loss_mask"].Data), loss
	}
	first, n0, l0 := read(*ro.Trajectory)
	questions, n1, l1 := read(ro.Segments[0])
	cont, n2, l2 := read(ro.Segments[1])
	summary, _ := spec.HandoffSummary("X")
	summary = summary[:strings.Index(summary, "X")]
	switch {
	case !strings.Contains(first, summary) || !strings.Contains(first, "The next agent has a few questions for you"):
		t.Errorf("the old context lacks the summary or the answer request:\n%q", first)
	case !strings.Contains(questions, "You are picking up work from a previous AI agent") || strings.Contains(questions, "Task Description:"):
		t.Errorf("the questions' context is not a fresh one with the question request:\n%q", questions)
	case !strings.Contains(cont, "Task Description:") || !strings.Contains(cont, "You are picking up work") || !strings.Contains(cont, "Here are the answers the other agent provided.") || strings.Contains(cont, summary):
		t.Errorf("the continuing context is not first prompt, questions and answers:\n%q", cont)
	}
	sampled := 0
	for _, tr := range r.record(t, ro).Turns {
		sampled += tr.Tokens
	}
	if l0+l1+l2 != ep.LossTokens || sampled != ep.LossTokens || n0+n1+n2 != ep.Tokens || n0 > 6144 || n2 > 6144 {
		t.Fatalf("loss tokens %d+%d+%d, episode %d, turns sampled %d; tokens %d+%d+%d, episode %d", l0, l1, l2, ep.LossTokens, sampled, n0, n1, n2, ep.Tokens)
	}
	t.Logf("contexts of %d, %d and %d tokens; %d sampled", n0, n1, n2, sampled)

	tr := &gpu.Supervisor{Name: "trainer", Command: gpu.TrainerCommand(filepath.Join(r.dir, "trainer"), gpu.Slot{}, "--seed", "0", "--threads", "1", "--block-size", "6144"),
		LogPath: filepath.Join(r.dir, "trainer.log")}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	var batch []gpu.TrajectoryRef
	for _, ref := range append([]store.Ref{*ro.Trajectory}, ro.Segments...) {
		batch = append(batch, gpu.TrajectoryRef{Trajectory: ref, Reward: ro.Reward, PolicyVersion: ro.PolicyVersions[0]})
	}
	// A minibatch over 5,000-token contexts outlasts the default minute
	// without progress on a loaded 2-core machine.
	gacts := &gpu.Activities{Trainer: gpu.NewClient(tr.URL()), Store: r.st, WorkDir: filepath.Join(r.dir, "gpu"), StallWindow: 10 * time.Minute}
	// One update epoch: each context is its own minibatch either way.
	m, err := gacts.TrainerPPOStep(context.Background(), gpu.TrainInput{Key: "t/ppo/1", Preset: "small", Trajectories: batch, Hyper: map[string]any{"update_epochs": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := m.Float("logprob_gap_replay"); g > 1e-3 {
		t.Errorf("the trainer does not reproduce the sampler on the segments: gap %v", g)
	}
	if n, _ := m.Float("trajectories"); int(n) != 3 {
		t.Errorf("the PPO step trained %v trajectories, want the 3 contexts", n)
	}
	if tk, _ := m.Float("tokens"); int(tk) != ep.LossTokens {
		t.Errorf("trainer saw %v loss tokens, the segments have %d", tk, ep.LossTokens)
	}
}
