package workflows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
)

// synthOneRound runs a one-round, one-variation chain whose candidate's
// oracle and nop runs end as given.
func synthOneRound(t *testing.T, oracle, nop RolloutResult, version workflow.Version) SynthesisResult {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	if version == workflow.DefaultVersion {
		env.OnGetVersion("synth-verifier-error-unscored", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	cand := testTask
	cand.ID, cand.Name = "fedcba9876543210", "demo-r1"
	env.OnActivity(act.Synthesize, mock.Anything, mock.Anything).Return(activities.SynthesizeResult{Task: cand, Steps: []string{"a"}, Categories: []string{"scripting"}}, nil)
	env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		if rin.Stage == "synth-oracle" {
			return mockedRollout(ctx, rin, oracle)
		}
		return mockedRollout(ctx, rin, nop)
	})
	env.ExecuteWorkflow(SynthesisWorkflow, SynthesisInput{RunID: "r", Seed: testTask, Rounds: 1, MaxVariations: 1})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res SynthesisResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSynthesisRejectsACandidateWhoseVerifierFails: a verifier_error is an
// agent's 0 (verifier-error-scored), but in the nop run it says the
// candidate's verifier cannot even run on the untouched environment, and in
// the oracle run that the reference was never judged. RST judges both as the
// audit does: not scored, the candidate rejected as infra naming the
// verifier error; before, a nop whose verifier hung was accepted ("the
// environment fails") and an oracle's was oracle_failed at "0/0
// assertions". Histories from before synth-verifier-error-unscored replay as
// they ran.
func TestSynthesisRejectsACandidateWhoseVerifierFails(t *testing.T) {
	resolved := RolloutResult{Outcome: OutcomeResolved, Scored: true, Resolved: true, Reward: 1, Passed: 3, Total: 3}
	unresolved := RolloutResult{Outcome: OutcomeUnresolved, Scored: true, Total: 3}
	hung := RolloutResult{Outcome: OutcomeVerifierError, Scored: true, Error: "VerifierError: tests/test.sh timed out after 600s"}
	for _, c := range []struct {
		name        string
		oracle, nop RolloutResult
	}{{"nop", resolved, hung}, {"oracle", hung, unresolved}} {
		res := synthOneRound(t, c.oracle, c.nop, 1)
		if len(res.Accepted) != 0 || len(res.Rejected) != 1 {
			t.Fatalf("%s verifier_error: accepted %+v, rejected %+v; want the candidate rejected", c.name, res.Accepted, res.Rejected)
		}
		if r := res.Rejected[0]; r.Class != "infra" || !strings.Contains(r.Reason, "verifier_error") || !strings.Contains(r.Reason, "timed out after 600s") {
			t.Errorf("%s verifier_error: rejected %s: %s; want infra naming the verifier error", c.name, r.Class, r.Reason)
		}
	}
	// Guard: the chain still accepts a candidate whose nop run is a plain 0.
	if res := synthOneRound(t, resolved, unresolved, 1); len(res.Accepted) != 1 {
		t.Errorf("a sound candidate: accepted %d, rejected %+v", len(res.Accepted), res.Rejected)
	}
	// Before the version, a history replays as it ran: accepted.
	if res := synthOneRound(t, resolved, hung, workflow.DefaultVersion); len(res.Accepted) != 1 {
		t.Errorf("before synth-verifier-error-unscored: accepted %d, rejected %+v; want the history's acceptance", len(res.Accepted), res.Rejected)
	}
}
