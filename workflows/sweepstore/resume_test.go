package sweepstore

import (
	"context"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// A sweep that failed before its report: the plan reads its result chunks,
// reruns the unfinished rollout and the errored ones of the asked types,
// keeps the rest; round 2 plans from round 1's report, and a round whose
// predecessor has no report is refused.
func TestPlanEvalResumeFromChunks(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st}
	tasks := []task.Ref{{ID: "t1", Name: "one", Bundle: store.Ref{URI: "file:///b1"}}, {ID: "t2", Name: "two", Bundle: store.Ref{URI: "file:///b2"}}}
	manifest, err := store.PutJSON(ctx, st, "evals/s/tasks.json", task.Pool{Name: "s", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	chunk := []workflows.RolloutResult{
		{RolloutID: "r11", TaskID: "t1", Attempt: 1, Outcome: workflows.OutcomeResolved, Scored: true, Resolved: true},
		{RolloutID: "r21", TaskID: "t2", Attempt: 1, Outcome: workflows.OutcomeInfraError},
		{RolloutID: "r12", TaskID: "t1", Attempt: 2, Outcome: workflows.OutcomeTaskInvalid},
	} // t2 attempt 2 never finished
	if _, err := store.PutJSON(ctx, st, workflows.ResultChunkKey("s", 0), chunk); err != nil {
		t.Fatal(err)
	}
	in := workflows.ResumePlanInput{SweepID: "s", Round: 1, Manifest: manifest, Attempts: 2, ErrorTypes: workflows.DefaultResumeErrorTypes}
	plan, err := a.PlanEvalResume(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range plan.Jobs {
		got = append(got, j.Task.ID+"/"+string(rune('0'+j.Attempt))+":"+j.Replaces)
	}
	if strings.Join(got, " ") != "t2/1:InfraError t2/2:" || plan.KeptCount != 2 {
		t.Fatalf("jobs %v, kept %d; want t2/1 (InfraError) and t2/2 (unfinished), 2 kept (task_invalid is not a default)", got, plan.KeptCount)
	}
	in.ErrorTypes = []string{workflows.ErrorTaskInvalid}
	if plan, err = a.PlanEvalResume(ctx, in); err != nil || len(plan.Jobs) != 2 || plan.Jobs[0].Replaces != workflows.ErrorTaskInvalid {
		t.Fatalf("-f TaskInvalid: %+v, %v; want t1/2 and the unfinished t2/2", plan.Jobs, err)
	}
	in.Round = 2
	if _, err := a.PlanEvalResume(ctx, in); err == nil || !strings.Contains(err.Error(), "round 1 has no report") {
		t.Fatalf("round 2 without round 1's report: %v", err)
	}
	in.ErrorTypes = []string{"Bogus"}
	if _, err := a.PlanEvalResume(ctx, in); err == nil || !strings.Contains(err.Error(), `"Bogus"`) {
		t.Fatalf("unknown error type: %v", err)
	}
}

// TestDefaultResumeRerunsOnlyUnscoredVerifierErrors: a verifier_error is a
// scored 0 since GetVersion verifier-error-scored, which a default resume
// keeps; one recorded before it is unscored, no score at all, and a default
// resume reruns it (kept, it stayed unscored unless -f VerifierError, which
// reruns the scored 0s too). -f VerifierError still reruns both; -f
// InfraError neither.
func TestDefaultResumeRerunsOnlyUnscoredVerifierErrors(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st}
	tasks := []task.Ref{{ID: "t1", Name: "old", Bundle: store.Ref{URI: "file:///b1"}}, {ID: "t2", Name: "new", Bundle: store.Ref{URI: "file:///b2"}}}
	manifest, err := store.PutJSON(ctx, st, "evals/s/tasks.json", task.Pool{Name: "s", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	hung := "VerifierError: tests/test.sh timed out after 600s"
	chunk := []workflows.RolloutResult{
		{RolloutID: "r1", TaskID: "t1", Attempt: 1, Outcome: workflows.OutcomeVerifierError, Error: hung},
		{RolloutID: "r2", TaskID: "t2", Attempt: 1, Outcome: workflows.OutcomeVerifierError, Scored: true, Error: hung},
	}
	if _, err := store.PutJSON(ctx, st, workflows.ResultChunkKey("s", 0), chunk); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		types   []string
		dflt    bool
		want    string
		keptCnt int
	}{
		{"default", workflows.DefaultResumeErrorTypes, true, "t1:VerifierError", 1},
		{"-f VerifierError", []string{workflows.ErrorVerifier}, false, "t1:VerifierError t2:VerifierError", 0},
		{"-f InfraError", []string{workflows.ErrorInfra}, false, "", 2},
	} {
		plan, err := a.PlanEvalResume(ctx, workflows.ResumePlanInput{SweepID: "s", Round: 1, Manifest: manifest, Attempts: 1,
			ErrorTypes: c.types, UnscoredVerifierErrors: c.dflt})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range plan.Jobs {
			got = append(got, j.Task.ID+":"+j.Replaces)
		}
		if strings.Join(got, " ") != c.want || plan.KeptCount != c.keptCnt {
			t.Errorf("%s: reruns %v, keeps %d; want %q, %d kept (unscored verifier_error: t1, scored 0: t2)", c.name, got, plan.KeptCount, c.want, c.keptCnt)
		}
	}
}
