package harborout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/internal/config"
)

// HarborPython is Harbor's interpreter ($T1FLOW_HARBOR_PYTHON, else the
// harborenv under T1FLOW_HOME); "" when absent. Under T1FLOW_INTEGRATION a
// missing one fails the test: the comparison with Harbor is the point.
func HarborPython(t testing.TB) string {
	t.Helper()
	py := os.Getenv("T1FLOW_HARBOR_PYTHON")
	if py == "" {
		py = filepath.Join(config.Home(), "harborenv", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") != "" {
			t.Fatalf("%s is missing: run scripts/ensure-harbor-env.sh (make harborenv)", py)
		}
		t.Skipf("no Harbor env at %s (make harborenv)", py)
	}
	return py
}

// RunCheck is Check under Harbor's interpreter.
func RunCheck(t testing.TB, dir string) (CheckReport, error) {
	t.Helper()
	return Check(context.Background(), HarborPython(t), dir)
}

func f64(v float64) *float64 { return &v }

func sampleJob() Job {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	base := Trial{TaskPath: "/tasks/hello", TaskChecksum: "abc", Agent: "oracle", AgentVersion: "t1flow", Instruction: "Write hello."}
	mk := func(name string, reward *float64, exc string, steps ...Step) Trial {
		t := base
		t.Name, t.TaskName, t.Reward, t.ExceptionType, t.Steps = name, strings.Split(name, "__")[0], reward, exc, steps
		t.StartedAt, t.FinishedAt = t0, t0.Add(3*time.Second)
		if exc != "" {
			t.ExceptionMessage = exc + ": sandbox kept failing"
		}
		return t
	}
	return Job{
		ID: "oracle-123", StartedAt: t0, FinishedAt: t0.Add(time.Minute), Total: 5,
		Trials: []Trial{
			mk("hello__1", f64(1), "", Step{Keystrokes: "bash /solution/solve.sh\n", Output: "ok\n"}),
			mk("hello__2", f64(0.25), ""),
			mk("broken__1", nil, "InfraError"),
			mk("slow__1", f64(0), "AgentTimeoutError", Step{Keystrokes: "sleep 999\n"}),
		},
	}
}

// The job's stats and mean are Harbor's: a trial without a reward counts
// as 0 in the mean and is not in n_trials; errors are counted by type.
func TestJobResultIsHarborsArithmetic(t *testing.T) {
	r := NewJobResult(sampleJob())
	e := r.Stats.Evals["oracle__adhoc"]
	if e == nil {
		t.Fatalf("evals keys %v, want oracle__adhoc", r.Stats.Evals)
	}
	if got := e.Metrics[0]["mean"].(float64); got != 1.25/4 {
		t.Errorf("mean %v, want %v (the reward-less trial counts as 0)", got, 1.25/4)
	}
	if e.NTrials != 3 || e.NErrors != 2 || r.Stats.NErroredTrials != 2 || r.Stats.NPendingTrials != 1 {
		t.Errorf("n_trials %d n_errors %d errored %d pending %d, want 3 2 2 1", e.NTrials, e.NErrors, r.Stats.NErroredTrials, r.Stats.NPendingTrials)
	}
	if got := e.RewardStats[RewardKey]["1.0"]; len(got) != 1 || got[0] != "hello__1" {
		t.Errorf("reward_stats 1.0 = %v, want [hello__1]", got)
	}
	if got := e.RewardStats[RewardKey]["0.25"]; len(got) != 1 {
		t.Errorf("reward_stats 0.25 = %v", got)
	}
}

// Every file Write lays out loads with harbor 0.26.0's own models, and
// Harbor recomputes the same stats, mean and reward_valid from the trials.
func TestWrittenJobLoadsWithHarborsModels(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	j := sampleJob()
	if err := Write(dir, j); err != nil {
		t.Fatal(err)
	}
	rep, err := RunCheck(t, dir)
	if err != nil {
		t.Fatalf("harbor rejects the export: %v", err)
	}
	if len(rep.Trials) != 4 || rep.NTotalTrials != 5 || rep.NErroredTrials != 2 {
		t.Fatalf("harbor reads %d trials of %d, %d errored: %+v", len(rep.Trials), rep.NTotalTrials, rep.NErroredTrials, rep)
	}
	if tr := rep.Trials["broken__1"]; tr.Reward != nil || tr.RewardValid || tr.ExceptionType == nil || *tr.ExceptionType != "InfraError" {
		t.Errorf("broken__1 as harbor reads it: %+v", tr)
	}
	if tr := rep.Trials["hello__1"]; tr.Reward == nil || *tr.Reward != 1 || !tr.RewardValid || tr.Steps != 2 {
		t.Errorf("hello__1 as harbor reads it: %+v (want reward 1, valid, 2 steps)", tr)
	}
	if len(rep.PassAtK["oracle__adhoc"]) != 0 {
		t.Errorf("pass@k with a partial reward: %v, want none (as Harbor)", rep.PassAtK)
	}
	if err := Write(dir, j); err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("a second export into the same directory: %v, want a --dir error", err)
	}
}

// A field t1flow gets wrong fails the check: here the job's result.json
// claims one errored trial fewer than its trials show.
func TestHarborCheckCatchesAWrongField(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job")
	if err := Write(dir, sampleJob()); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "result.json")
	var doc map[string]any
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["stats"].(map[string]any)["n_errored_trials"] = 1.0
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := RunCheck(t, dir)
	if err == nil || !strings.Contains(err.Error(), "n_errored_trials") {
		t.Fatalf("a wrong n_errored_trials passed harbor's check: %v", err)
	}
}

// pass@k is Harbor's: over valid rewards only (the unscored trial is left
// out, not a failure), k = 2, 4, ... and 5, 10, ..., none for partial rewards.
func TestPassAtKIsHarbors(t *testing.T) {
	j := sampleJob()
	j.Trials = j.Trials[:0]
	for i, r := range []*float64{f64(1), f64(0), f64(0), f64(0), nil} {
		tr := sampleJob().Trials[0]
		tr.TaskName = []string{"a", "a", "b", "b", "a"}[i]
		tr.Name, tr.Reward = TrialName(tr.TaskName, fmt.Sprint(i)), r
		if r == nil {
			tr.ExceptionType = "InfraError"
		}
		j.Trials = append(j.Trials, tr)
	}
	got := NewJobResult(j).Stats.Evals["oracle__adhoc"].PassAtK
	if len(got) != 1 || got["2"] != 0.5 {
		t.Fatalf("pass@k %v, want {2: 0.5} (a: 1 of 2, b: 0 of 2; the unscored left out)", got)
	}
	dir := filepath.Join(t.TempDir(), "job")
	if err := Write(dir, j); err != nil {
		t.Fatal(err)
	}
	rep, err := RunCheck(t, dir)
	if err != nil {
		t.Fatalf("harbor rejects the export: %v", err)
	}
	if rep.PassAtK["oracle__adhoc"]["2"] != 0.5 {
		t.Errorf("pass@k as harbor reads it: %v", rep.PassAtK)
	}
}

// A task whose reward.json names several rewards keeps them as Harbor's
// dict: reward_stats per key, one mean per key with a missing key and a
// reward-less trial counting 0, no pass@k; Harbor's own Mean agrees.
func TestSeveralNamedRewardsAreHarbors(t *testing.T) {
	j := sampleJob()
	j.Trials = j.Trials[:0]
	for i, rd := range []map[string]float64{
		{"correctness": 1, "style": 0.5},
		{"correctness": 0, "style": 1},
		{"correctness": 1},
		nil,
	} {
		tr := sampleJob().Trials[0]
		tr.Name, tr.Rewards, tr.Reward = TrialName("multi", fmt.Sprint(i)), rd, nil
		if rd == nil {
			tr.ExceptionType = "VerifierTimeoutError"
		}
		j.Trials = append(j.Trials, tr)
	}
	e := NewJobResult(j).Stats.Evals["oracle__adhoc"]
	want := map[string]float64{"correctness": 2.0 / 4, "style": 1.5 / 4}
	if len(e.Metrics) != 1 || len(e.Metrics[0]) != len(want) {
		t.Fatalf("metrics %v, want one dict %v", e.Metrics, want)
	}
	for k, v := range want {
		if got, _ := e.Metrics[0][k].(float64); got != v {
			t.Errorf("metrics[%q] = %v, want %v (a missing key and the reward-less trial count 0)", k, e.Metrics[0][k], v)
		}
	}
	if got := e.RewardStats["style"]["0.5"]; len(got) != 1 || got[0] != TrialName("multi", "0") {
		t.Errorf("reward_stats style 0.5 = %v, want [%s]", got, TrialName("multi", "0"))
	}
	if got := e.RewardStats["correctness"]["1.0"]; len(got) != 2 {
		t.Errorf("reward_stats correctness 1.0 = %v, want two trials", got)
	}
	if len(e.PassAtK) != 0 {
		t.Errorf("pass@k %v with several named rewards, want none (as Harbor)", e.PassAtK)
	}
	dir := filepath.Join(t.TempDir(), "job")
	if err := Write(dir, j); err != nil {
		t.Fatal(err)
	}
	rep, err := RunCheck(t, dir)
	if err != nil {
		t.Fatalf("harbor rejects the export: %v", err)
	}
	if got := rep.Trials[TrialName("multi", "0")]; got.Rewards["style"] != 0.5 || got.Reward != nil || !got.RewardValid {
		t.Errorf("multi__0 as harbor reads it: %+v, want rewards {correctness 1, style 0.5}, no single reward", got)
	}
	if got := rep.Metrics["oracle__adhoc"]; got["style"] != want["style"] {
		t.Errorf("metrics as harbor reads them: %v, want %v", got, want)
	}
}
