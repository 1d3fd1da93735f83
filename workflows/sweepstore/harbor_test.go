package sweepstore

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/harborout"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/trajectory"
	"github.com/t1flow/t1flow/workflows"
)

func putBundle(t *testing.T, st store.Store, id, instruction string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "instruction.md", Mode: 0o644, Size: int64(len(instruction)), Typeflag: tar.TypeReg})
	tw.Write([]byte(instruction))
	tw.Close()
	if _, err := st.Put(context.Background(), "tasks/"+id+".tar", &buf); err != nil {
		t.Fatal(err)
	}
}

// A report becomes Harbor's trials: Harbor's reward for the scored (the
// reward file's value, else 1 or 0), none and the error type for the
// unscored, the instruction from the bundle, the turns from the record, and
// two tasks of one name told apart by their IDs.
func TestHarborJobFromAReport(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putBundle(t, st, "aaaaaaaaaaaa", "Count the levels.")
	putBundle(t, st, "bbbbbbbbbbbb", "Count them again.")
	rec, err := store.PutJSON(ctx, st, "rollouts/r1.json", workflows.RolloutRecord{
		Turns:  []activities.TurnResult{{Turn: 0, Command: "bash /solution/solve.sh", Preview: "done\n"}},
		Verify: &activities.VerifyResult{Preview: "1 passed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	half := 0.5
	rep := workflows.EvalReport{SweepID: "s", Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Rollouts: []workflows.RolloutResult{
		{Name: "levels", TaskID: "aaaaaaaaaaaa", Attempt: 1, Outcome: workflows.OutcomeResolved, Scored: true, Resolved: true, Record: &rec},
		{Name: "levels", TaskID: "bbbbbbbbbbbb", Attempt: 1, Outcome: workflows.OutcomeUnresolved, Scored: true, HarborReward: &half},
		{Name: "levels", TaskID: "aaaaaaaaaaaa", Attempt: 2, Outcome: workflows.OutcomeInfraError, Error: "InfraError: docker gone"},
	}}
	rep.Summary = workflows.Summarize(rep.Rollouts)
	j, err := HarborJob(ctx, st, rep, "", HarborTimes{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Trials) != 3 {
		t.Fatalf("%d trials", len(j.Trials))
	}
	a, b, broken := j.Trials[0], j.Trials[1], j.Trials[2]
	switch {
	case a.Name != "levels__aaaaaaaa-1" || b.Name != "levels__bbbbbbbb-1":
		t.Errorf("names %q %q: two tasks named levels must differ", a.Name, b.Name)
	case a.Agent != "oracle" || a.Reward == nil || *a.Reward != 1 || a.Instruction != "Count the levels." || len(a.Steps) != 1 || a.Steps[0].Keystrokes != "bash /solution/solve.sh" || a.VerifierOutput != "1 passed":
		t.Errorf("resolved trial: %+v", a)
	case b.Reward == nil || *b.Reward != 0.5 || b.Instruction != "Count them again.":
		t.Errorf("trial with a reward file: %+v (want Harbor's 0.5)", b)
	case broken.Reward != nil || broken.ExceptionType != workflows.ErrorInfra || broken.ExceptionMessage != "InfraError: docker gone":
		t.Errorf("unscored trial: %+v (want no reward, InfraError)", broken)
	}
	dir := filepath.Join(t.TempDir(), "job")
	if err := harborout.Write(dir, j); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "levels__aaaaaaaa-1", "verifier", "reward.txt")); err != nil || string(b) != "1\n" {
		t.Errorf("verifier/reward.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "levels__aaaaaaaa-2", "verifier")); !os.IsNotExist(err) {
		t.Errorf("an unscored trial has a verifier directory: %v", err)
	}
}

// A reward.json of several named rewards reaches Harbor's trial as that
// dict (and its reward.json); a single "reward" stays Reward alone.
func TestHarborTrialKeepsNamedRewards(t *testing.T) {
	named := map[string]float64{"correctness": 1, "style": 0.5}
	tr := harborTrial(workflows.RolloutResult{Name: "lint", TaskID: "cccccccccccc", Attempt: 1, Scored: true, HarborRewards: named}, activities.AgentSpec{Kind: activities.AgentOracle}, "")
	if len(tr.Rewards) != 2 || tr.Rewards["style"] != 0.5 || tr.RewardDict()["correctness"] != 1 {
		t.Errorf("trial rewards %v, want %v", tr.Rewards, named)
	}
	one := 0.25
	tr = harborTrial(workflows.RolloutResult{Name: "lint", TaskID: "cccccccccccc", Attempt: 1, Scored: true, HarborReward: &one, HarborRewards: map[string]float64{"reward": one}}, activities.AgentSpec{Kind: activities.AgentOracle}, "")
	if tr.Rewards != nil || tr.Reward == nil || *tr.Reward != one {
		t.Errorf("single reward: rewards %v reward %v, want Reward 0.25 alone", tr.Rewards, tr.Reward)
	}
	tr = harborTrial(workflows.RolloutResult{Name: "lint", TaskID: "cccccccccccc", Attempt: 1, HarborRewards: named, Outcome: workflows.OutcomeInfraError, Error: "InfraError: gone"}, activities.AgentSpec{Kind: activities.AgentOracle}, "")
	if tr.RewardDict() != nil {
		t.Errorf("an unscored trial has rewards %v", tr.RewardDict())
	}
}

// A verifier_error, scored 0 in t1flow's own table, is exported as Harbor
// records a verifier timeout: its exception and no reward, which Harbor's
// Mean counts as 0 and its pass@k leaves out.
func TestHarborTrialOfAVerifierErrorHasNoReward(t *testing.T) {
	tr := harborTrial(workflows.RolloutResult{Name: "hangs", TaskID: "cccccccccccc", Attempt: 1, Scored: true, Outcome: workflows.OutcomeVerifierError,
		Error: "VerifierError: tests/test.sh timed out after 5s"}, activities.AgentSpec{Kind: activities.AgentOracle}, "")
	if tr.Reward != nil || tr.RewardDict() != nil || tr.ExceptionType != workflows.ErrorVerifier || tr.ExceptionMessage == "" {
		t.Errorf("verifier_error trial: reward %v, rewards %v, exception %q %q: want Harbor's verifier timeout, no reward", tr.Reward, tr.RewardDict(), tr.ExceptionType, tr.ExceptionMessage)
	}
}

// A policy rollout's steps carry the tokens it sampled and their
// log-probs, one run of generated positions per turn, and Harbor's ATIF
// model takes them.
func TestHarborJobCarriesAPolicysTokens(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putBundle(t, st, "cccccccccccc", "Say hi.")
	tr := trajectory.Record{Tokens: []int32{1, 2, 3, 4, 5, 6}, LossMask: []uint8{0, 0, 1, 1, 0, 1}, Logprobs: []float32{0, 0, -0.5, -0.25, 0, -2}}
	b, err := tr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tref, err := st.Put(ctx, "rollouts/p.safetensors", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.PutJSON(ctx, st, "rollouts/p.json", workflows.RolloutRecord{Turns: []activities.TurnResult{{Turn: 0, Command: "echo hi\n"}, {Turn: 1, Command: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	rep := workflows.EvalReport{SweepID: "s", Agent: activities.AgentSpec{Kind: activities.AgentPolicy, Harness: "terminus-2"}, Rollouts: []workflows.RolloutResult{
		{Name: "hi", TaskID: "cccccccccccc", Attempt: 1, Outcome: workflows.OutcomeResolved, Scored: true, Resolved: true, Record: &rec, Trajectory: &tref, PolicyVersions: []string{"v3"}},
	}}
	rep.Summary = workflows.Summarize(rep.Rollouts)
	j, err := HarborJob(ctx, st, rep, "", HarborTimes{})
	if err != nil {
		t.Fatal(err)
	}
	steps := j.Trials[0].Steps
	if j.Trials[0].Agent != "terminus-2" || j.Trials[0].Model != "v3" || len(steps) != 2 ||
		fmt.Sprint(steps[0].TokenIDs, steps[0].Logprobs, steps[1].TokenIDs, steps[1].Logprobs) != "[3 4] [-0.5 -0.25] [6] [-2]" {
		t.Fatalf("trial %+v", j.Trials[0])
	}
	py := harbor.Python()
	if _, err := os.Stat(py); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") != "" {
			t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", py)
		}
		t.Skipf("no Harbor env at %s", py)
	}
	dir := filepath.Join(t.TempDir(), "job")
	if err := harborout.Write(dir, j); err != nil {
		t.Fatal(err)
	}
	got, err := harborout.Check(ctx, py, dir)
	if err != nil || got.Trials["hi__1"].Steps != 3 {
		t.Fatalf("harbor reads %+v, %v", got, err)
	}
}
