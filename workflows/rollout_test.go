package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/sandbox"
)

var testTask = task.Ref{ID: "0123456789abcdef", Name: "demo", Category: "scripting", Difficulty: "easy",
	Bundle: store.Ref{URI: "file:///tmp/x.tar", SHA256: "00", Bytes: 1}}

// fakeSandbox records what a rollout did to its sandboxes.
type fakeSandbox struct {
	createErr error // returned by every create when set
	mu        sync.Mutex
	created   []int
	destroyed []string
	turns     []int
}

func (f *fakeSandbox) create(_ context.Context, in activities.CreateSandboxInput) (activities.CreateSandboxResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, in.SandboxAttempt)
	if f.createErr != nil {
		return activities.CreateSandboxResult{}, f.createErr
	}
	name := fmt.Sprintf("sb-%d", in.SandboxAttempt)
	return activities.CreateSandboxResult{
		Sandbox:         activities.Sandbox{ContainerID: name, Name: name, Host: "h", HostQueue: "t1flow-sandbox-h"},
		AgentTimeoutSec: 600, VerifierTimeoutSec: 60,
	}, nil
}

func (f *fakeSandbox) destroy(_ context.Context, in activities.DestroyInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroyed = append(f.destroyed, in.Sandbox.Name)
	return nil
}

func (f *fakeSandbox) turn(_ context.Context, in activities.TurnInput) (activities.TurnResult, error) {
	f.mu.Lock()
	f.turns = append(f.turns, in.Turn)
	f.mu.Unlock()
	if c := in.Agent.NextCommand(in.Turn); c != "" {
		return activities.TurnResult{Turn: in.Turn, Command: c, Final: in.Turn == len(in.Agent.Commands)-1 || in.Agent.Kind == activities.AgentOracle}, nil
	}
	return activities.TurnResult{Turn: in.Turn, Done: true}, nil
}

func verified(passed, total int) func(context.Context, activities.VerifyInput) (activities.VerifyResult, error) {
	return func(context.Context, activities.VerifyInput) (activities.VerifyResult, error) {
		return activities.VerifyResult{Format: "junit", Passed: passed, Total: total}, nil
	}
}

func newEnv(t *testing.T, f *fakeSandbox) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	registerSweepFakes(env)
	env.OnActivity(act.CreateSandbox, mock.Anything, mock.Anything).Return(f.create).Maybe()
	env.OnActivity(act.DestroySandbox, mock.Anything, mock.Anything).Return(f.destroy).Maybe()
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK).Maybe()
	return env
}

func rolloutInput(agent activities.AgentSpec) RolloutInput {
	return RolloutInput{CampaignID: "c1", Stage: "eval", Task: testTask, Attempt: 1, Agent: agent}
}

func runRollout(t *testing.T, env *testsuite.TestWorkflowEnvironment, in RolloutInput) RolloutResult {
	t.Helper()
	env.ExecuteWorkflow(RolloutWorkflow, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res
}

func TestOracleRolloutResolves(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(5, 5))
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeResolved, res.Outcome)
	require.True(t, res.Scored && res.Resolved)
	require.InDelta(t, 5.0/20, res.Reward, 1e-12) // passing / S, not a pass ratio
	require.Equal(t, 1, res.Turns)
	require.Equal(t, AgentEndCompleted, res.AgentEnd)
	require.Equal(t, []string{"sb-1"}, f.destroyed)
	require.NotNil(t, res.Record)
	require.Equal(t, "c1.eval.0.0123456789abcdef.1", res.RolloutID)
}

func TestPartialRewardIsPassingOverS(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(3, 5))
	in := rolloutInput(activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"a", "b"}})
	in.S = 10
	res := runRollout(t, env, in)
	require.Equal(t, OutcomeUnresolved, res.Outcome)
	require.InDelta(t, 0.3, res.Reward, 1e-12)
	require.Equal(t, 2, res.Turns)
}

// TestHarborRewardDecidesResolution: a partial reward.txt beside passing
// tests is unresolved, with Harbor's reward on the result; skipped tests do
// not make a run unresolved.
func TestHarborRewardDecidesResolution(t *testing.T) {
	half := 0.5
	for name, c := range map[string]struct {
		vr       activities.VerifyResult
		resolved bool
	}{
		"partial reward.txt": {activities.VerifyResult{Passed: 2, Total: 2, Reward: &half, RewardFile: "reward.txt",
			Disagreement: "reward.txt says reward 0.5, ctrf says 2 passed, 0 skipped of 2: the reward file decides"}, false},
		"skipped test": {activities.VerifyResult{Passed: 1, Total: 2, Assertions: []activities.Assertion{
			{Name: "a", Status: activities.StatusPassed}, {Name: "b", Status: activities.StatusSkipped}}}, true},
	} {
		f := &fakeSandbox{}
		env := newEnv(t, f)
		env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
		env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(c.vr, nil)
		res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
		if res.Resolved != c.resolved || (c.vr.Reward != nil) != (res.HarborReward != nil) {
			t.Errorf("%s: resolved %v (want %v), harbor reward %v", name, res.Resolved, c.resolved, res.HarborReward)
		}
		// The verifier's disagreement reaches the result (tables, the UI).
		if res.Disagreement != c.vr.Disagreement {
			t.Errorf("%s: disagreement %q, the verifier said %q", name, res.Disagreement, c.vr.Disagreement)
		}
	}
}

func TestVanishedSandboxRetriesWithFreshOne(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	var calls atomic.Int32
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.TurnInput) (activities.TurnResult, error) {
		if calls.Add(1) == 1 {
			return activities.TurnResult{}, errs.SandboxGonef("container vanished")
		}
		return f.turn(ctx, in)
	})
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(4, 4))
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeResolved, res.Outcome)
	require.Equal(t, 2, res.SandboxAttempts)
	require.Equal(t, []int{1, 2}, f.created)
	require.Equal(t, []string{"sb-1", "sb-2"}, f.destroyed)
	require.Equal(t, 1, res.Turns, "the fresh sandbox starts the episode over")
}

// A turn lost to a worker that died after sending it (activities' turn
// journal) is not retried: the sandbox is released unverified, the episode
// starts over in a fresh one, and the result counts the lost turn.
func TestLostTurnStartsOverInFreshSandbox(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	var calls atomic.Int32
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.TurnInput) (activities.TurnResult, error) {
		if calls.Add(1) == 2 {
			return activities.TurnResult{}, errs.TurnLostf("turn 1 in sb-1 was lost")
		}
		return f.turn(ctx, in)
	})
	var verified1 atomic.Int32
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.VerifyInput) (activities.VerifyResult, error) {
		verified1.Add(1)
		require.Equal(t, "sb-2", in.Sandbox.Name, "the sandbox that lost a turn is never verified")
		return verified(2, 2)(ctx, in)
	})
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"a", "b"}}))
	require.Equal(t, OutcomeResolved, res.Outcome)
	require.Equal(t, int32(4), calls.Load(), "the lost turn was retried in its sandbox")
	require.Equal(t, 2, res.SandboxAttempts)
	require.Equal(t, 1, res.LostTurns)
	require.Equal(t, 2, res.Turns, "the fresh sandbox starts the episode over")
	require.Equal(t, []string{"sb-1", "sb-2"}, f.destroyed)
}

func TestInfraExhaustedIsRecordedNotScored(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(activities.TurnResult{}, errs.SandboxGonef("gone again"))
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeInfraError, res.Outcome)
	require.False(t, res.Scored)
	require.Equal(t, 3, res.SandboxAttempts)
	require.Len(t, f.destroyed, 3)
	require.Contains(t, res.Error, "SandboxGone")
}

func TestTaskInvalidStopsAtOnce(t *testing.T) {
	f := &fakeSandbox{createErr: errs.TaskInvalidf("environment/Dockerfile: build failed")}
	env := newEnv(t, f)
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeTaskInvalid, res.Outcome)
	require.Equal(t, []int{1}, f.created, "TaskInvalid is not retried")
	require.Empty(t, f.destroyed)
	require.Contains(t, res.Error, "environment/Dockerfile")
}

// TestVerifierFailureIsScoredZero: a verifier that still fails after its
// retries in the agent's sandbox (test.sh timed out, crashed or wrote no
// results: a fifo where the tests read, a deleted tool, cause each) is scored
// at 0, as Harbor grades it, and counts once as a scored 0. Before
// verifier-error-scored it was left unscored: an agent that could not solve a
// task could turn its 0 into no sample at all.
func TestVerifierFailureIsScoredZero(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	var verifies atomic.Int32
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(func(context.Context, activities.VerifyInput) (activities.VerifyResult, error) {
		verifies.Add(1)
		return activities.VerifyResult{}, errs.Verifierf("tests/test.sh timed out after 5s (verifier.timeout_sec); output tail:\n...")
	})
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeVerifierError, res.Outcome)
	require.True(t, res.Scored, "the agent's sandbox made its verifier fail: a 0, not a rollout left out")
	require.Zero(t, res.Reward)
	require.False(t, res.Resolved)
	require.Contains(t, res.Error, "VerifierError: tests/test.sh timed out after 5s")
	require.EqualValues(t, 3, verifies.Load(), "a verifier error is retried first")
	require.Equal(t, []string{"sb-1"}, f.destroyed, "retried in the agent's sandbox, not a fresh one")
	s := Summarize([]RolloutResult{res})
	require.Equal(t, 1, s.Scored)
	require.Zero(t, s.Unscored)
	require.Zero(t, s.ResolvedRate)
	require.Equal(t, 1, s.Outcomes[OutcomeVerifierError])
}

// A history from before verifier-error-scored replays as it ran: unscored.
func TestVerifierFailureBeforeTheVersionIsUnscored(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnGetVersion("verifier-error-scored", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(activities.VerifyResult{}, errs.Verifierf("no results in /logs/verifier"))
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeVerifierError, res.Outcome)
	require.False(t, res.Scored)
}

// TestVerifyInfraFailureIsNotScored: the host failing under the verifier is
// not the agent's 0. Docker failing (InfraError) or the sandbox gone is
// retried, then a fresh sandbox; a last try that timed out (its host lost)
// is too, though the server keeps an earlier try's VerifierError as the
// timeout's cause. Exhausted, each is an unscored infra_error.
func TestVerifyInfraFailureIsNotScored(t *testing.T) {
	for name, fail := range map[string]error{
		"InfraError":  errs.Infraf("run tests/test.sh in sb: reading exec output: connection reset by peer"),
		"SandboxGone": errs.SandboxGonef("sb stopped under its verifier (tests/test.sh exited 137: no results)"),
		"host lost":   temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, errs.Verifierf("tests/test.sh timed out after 5s")),
	} {
		f := &fakeSandbox{}
		env := newEnv(t, f)
		env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
		env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(activities.VerifyResult{}, fail)
		res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
		if res.Outcome != OutcomeInfraError || res.Scored || res.SandboxAttempts != DefaultSandboxAttempts || len(f.destroyed) != DefaultSandboxAttempts ||
			strings.HasPrefix(res.Error, "VerifierError") {
			t.Errorf("%s: %s (scored %v) after %d sandboxes, %d destroyed: want an unscored infra_error after %d fresh sandboxes (%s)",
				name, res.Outcome, res.Scored, res.SandboxAttempts, len(f.destroyed), DefaultSandboxAttempts, res.Error)
		}
	}
}

func TestTamperedIsScoredZeroWithEvidence(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(activities.VerifyResult{
		StorageLimit: true,
		Tampered:     []sandbox.TamperFinding{{Path: "/conftest.py", Kind: "added", Reason: "pytest configuration or conftest above /tests"}},
	}, nil)
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeTampered, res.Outcome)
	require.True(t, res.Scored, "tampering is behaviour to train away: scored, at 0")
	require.Zero(t, res.Reward)
	require.False(t, res.Resolved)
	require.Contains(t, res.Error, "added /conftest.py")
	require.Equal(t, AgentEndStorageLimit, res.AgentEnd)
	s := Summarize([]RolloutResult{res})
	require.Equal(t, 1, s.Tampered)
	require.Equal(t, 1, s.Scored)
}

func TestTurnCap(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(0, 3))
	in := rolloutInput(activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"a", "b", "c", "d"}})
	in.TurnCap = 2
	res := runRollout(t, env, in)
	require.Equal(t, AgentEndTurnCap, res.AgentEnd)
	require.Equal(t, 2, res.Turns)
	require.Equal(t, OutcomeUnresolved, res.Outcome)
}

func TestAgentTimeoutStillVerifies(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	var limits []float64
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.TurnInput) (activities.TurnResult, error) {
		limits = append(limits, in.TimeoutSec)
		return activities.TurnResult{Turn: in.Turn, Command: "sleep 100", TimedOut: true, ExitCode: 124}, nil
	})
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(1, 2))
	in := rolloutInput(activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 100", "true"}})
	in.AgentTimeoutSec = 5
	res := runRollout(t, env, in)
	require.Equal(t, AgentEndTimeout, res.AgentEnd)
	require.Equal(t, []float64{5}, limits, "the turn gets what is left of the agent timeout")
	require.True(t, res.Scored)
	require.InDelta(t, 1.0/20, res.Reward, 1e-12)
}

func TestCancelledRolloutStillDestroysSandbox(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn).After(time.Hour)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(RolloutWorkflow, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.True(t, env.IsWorkflowCompleted())
	var ce *temporal.CanceledError
	require.True(t, errors.As(env.GetWorkflowError(), &ce), "got %v", env.GetWorkflowError())
	require.Equal(t, []string{"sb-1"}, f.destroyed)
}

func TestBadInputFailsWithoutSandbox(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	env.ExecuteWorkflow(RolloutWorkflow, rolloutInput(activities.AgentSpec{Kind: "wizard"}))
	require.Error(t, env.GetWorkflowError())
	require.Contains(t, env.GetWorkflowError().Error(), "unknown kind")
	require.Empty(t, f.created)
}

func TestEvalSweepSlidingWindow(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	var running, peak atomic.Int32
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.TurnInput) (activities.TurnResult, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(30 * time.Millisecond)
		running.Add(-1)
		return f.turn(ctx, in)
	})
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(2, 2))
	var tasks []task.Ref
	for i := 0; i < 5; i++ {
		tk := testTask
		tk.ID = fmt.Sprintf("%016d", i)
		tk.Name = fmt.Sprintf("task-%d", i)
		tasks = append(tasks, tk)
	}
	env.ExecuteWorkflow(EvalSweepWorkflow, EvalSweepInput{
		SweepID: "s1", Tasks: tasks, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Attempts: 2, Concurrency: 3,
	})
	require.NoError(t, env.GetWorkflowError())
	var res EvalSweepResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, 10, res.Summary.Rollouts)
	require.Equal(t, 10, res.Summary.Resolved)
	require.LessOrEqual(t, peak.Load(), int32(3), "never more than --concurrency rollouts at once")
	require.GreaterOrEqual(t, peak.Load(), int32(2), "the window should actually run rollouts in parallel")
	require.Len(t, f.destroyed, 10)
}

func TestSummarizeCountsUnscoredApart(t *testing.T) {
	s := Summarize([]RolloutResult{
		{Outcome: OutcomeResolved, Scored: true, Resolved: true, Reward: 0.25, Category: "a", Difficulty: "easy", Turns: 2},
		{Outcome: OutcomeUnresolved, Scored: true, Reward: 0.05, Category: "a", Difficulty: "hard", Turns: 4, Disagreement: "reward.txt says 0"},
		{Outcome: OutcomeInfraError, Category: "b", SandboxAttempts: 3},
	})
	require.Equal(t, 1, s.Disagreements)
	require.Equal(t, 3, s.Rollouts)
	require.Equal(t, 2, s.Scored)
	// The headline rate counts the unscored one as 0 (Harbor's); the rate
	// over the scored is beside it.
	require.InDelta(t, 1.0/3, s.ResolvedRate, 1e-12)
	require.InDelta(t, 0.5, s.ScoredResolvedRate, 1e-12)
	require.Equal(t, 1, s.Unscored)
	require.InDelta(t, 0.15, s.MeanReward, 1e-12)
	require.Equal(t, 1, s.Outcomes[OutcomeInfraError])
	require.Equal(t, 2, s.SandboxRetries)
	require.Equal(t, 2, s.ByCategory["a"].Scored)
	require.Equal(t, 0, s.ByCategory["b"].Scored)
	require.InDelta(t, 2.0, s.MeanTurns, 1e-12)
}

// TestGoneHostStartsOverOnAnotherHost: a call that no worker of the
// sandbox's host takes within the host wait (its host is gone) ends the
// attempt without waiting as long again for a destroy there (the reaper
// removes that sandbox); a fresh sandbox, made on the shared queue, scores
// the rollout. When every host is gone, the error names the host.
func TestGoneHostStartsOverOnAnotherHost(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	var calls atomic.Int32
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.TurnInput) (activities.TurnResult, error) {
		if calls.Add(1) == 2 {
			return activities.TurnResult{}, notTaken()
		}
		return f.turn(ctx, in)
	})
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(verified(2, 2))
	res := runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"a", "b"}}))
	require.Equal(t, OutcomeResolved, res.Outcome)
	require.Equal(t, 2, res.SandboxAttempts)
	require.Equal(t, 2, res.Turns, "the fresh sandbox starts the episode over")
	require.Equal(t, []int{1, 2}, f.created)
	require.Equal(t, []string{"sb-2"}, f.destroyed, "no destroy is sent to the gone host")

	f = &fakeSandbox{}
	env = newEnv(t, f)
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(activities.TurnResult{}, notTaken())
	res = runRollout(t, env, rolloutInput(activities.AgentSpec{Kind: activities.AgentOracle}))
	require.Equal(t, OutcomeInfraError, res.Outcome)
	require.False(t, res.Scored)
	require.Equal(t, DefaultSandboxAttempts, res.SandboxAttempts)
	require.Empty(t, f.destroyed)
	require.Contains(t, res.Error, "sandbox host h took no call on t1flow-sandbox-h within 10m0s: the host is gone")
}
