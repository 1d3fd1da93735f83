package workflows

import (
	"context"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
)

// Each outcome maps to the error type its Harbor result.json names and a
// resume filters on; a clean end has none.
func TestErrorTypeOfEachOutcome(t *testing.T) {
	for _, c := range []struct {
		r    RolloutResult
		want string
	}{
		{RolloutResult{Outcome: OutcomeInfraError}, ErrorInfra},
		{RolloutResult{Outcome: OutcomeVerifierError}, ErrorVerifier},
		{RolloutResult{Outcome: OutcomeVerifierError, Scored: true}, ErrorVerifier},
		{RolloutResult{Outcome: OutcomeTaskInvalid}, ErrorTaskInvalid},
		{RolloutResult{Outcome: OutcomeAborted}, ErrorRoutingMissing},
		{RolloutResult{Outcome: OutcomeUnresolved, Scored: true, AgentEnd: AgentEndTimeout}, ErrorAgentTimeout},
		{RolloutResult{Outcome: OutcomeUnresolved, Scored: true, AgentEnd: AgentEndContextExhausted}, ErrorContextLength},
		{RolloutResult{Outcome: OutcomeResolved, Scored: true, AgentEnd: AgentEndCompleted}, ""},
		{RolloutResult{Outcome: OutcomeTampered, Scored: true, AgentEnd: AgentEndCompleted}, ""},
	} {
		if got := c.r.ErrorType(); got != c.want {
			t.Errorf("%s/%s: %q, want %q", c.r.Outcome, c.r.AgentEnd, got, c.want)
		}
	}
	for _, typ := range DefaultResumeErrorTypes {
		if CheckErrorTypes([]string{typ}) != nil {
			t.Errorf("default %s is not a known type", typ)
		}
		// A verifier_error is scored 0: a default resume keeps it, as
		// Harbor's keeps a VerifierTimeoutError (-f VerifierError reruns it).
		if typ == ErrorVerifier {
			t.Errorf("a default resume reruns %s: a rollout that hung its verifier would get another try", typ)
		}
	}
}

// A resume's input names the field at fault.
func TestEvalResumeInputNamesTheFieldAtFault(t *testing.T) {
	ok := EvalResumeInput{SweepID: "s", Round: 1, Sweep: EvalSweepInput{
		TaskManifest: &store.Ref{URI: "file:///m"}, Attempts: 1, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for want, mut := range map[string]func(*EvalResumeInput){
		"sweep_id is empty":          func(in *EvalResumeInput) { in.SweepID = "" },
		"round 0 must be at least 1": func(in *EvalResumeInput) { in.Round = 0 },
		"sweep.task_manifest":        func(in *EvalResumeInput) { in.Sweep.TaskManifest = nil },
		"sweep.attempts 0":           func(in *EvalResumeInput) { in.Sweep.Attempts = 0 },
		`error type "Nope"`:          func(in *EvalResumeInput) { in.ErrorTypes = []string{"Nope"} },
	} {
		in := ok
		in.Sweep.TaskManifest = &store.Ref{URI: "file:///m"}
		mut(&in)
		if err := in.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// A resume that names no error types asks its plan to rerun the unscored
// verifier_errors too (recorded before verifier-error-scored; the scored 0s
// are kept, workflows/sweepstore's TestDefaultResumeRerunsOnlyUnscoredVerifierErrors);
// one that names any, -f VerifierError included, asks for those alone.
func TestDefaultResumeAsksForUnscoredVerifierErrors(t *testing.T) {
	for _, c := range []struct {
		types []string
		want  bool
	}{{nil, true}, {[]string{ErrorVerifier}, false}, {[]string{ErrorInfra}, false}} {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		var got *ResumePlanInput
		env.RegisterActivityWithOptions(func(_ context.Context, in ResumePlanInput) (ResumePlan, error) {
			got = &in
			return ResumePlan{}, temporal.NewNonRetryableApplicationError("stop here", errs.BadInput, nil)
		}, activity.RegisterOptions{Name: ActivityPlanEvalResume})
		env.ExecuteWorkflow(EvalResumeWorkflow, EvalResumeInput{SweepID: "s", Round: 1, ErrorTypes: c.types, Sweep: EvalSweepInput{
			TaskManifest: &store.Ref{URI: "file:///m"}, Attempts: 1, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}})
		if got == nil {
			t.Fatalf("-f %v: no plan asked for: %v", c.types, env.GetWorkflowError())
		}
		if got.UnscoredVerifierErrors != c.want || len(got.ErrorTypes) == 0 {
			t.Errorf("-f %v: plan asked for %v, unscored verifier errors %v; want %v", c.types, got.ErrorTypes, got.UnscoredVerifierErrors, c.want)
		}
	}
}
