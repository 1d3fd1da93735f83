package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// stepRig runs a PPO step whose rollouts (each taking a minute) are aborted
// while aborted(rollout input) says so, and records what the step started.
type stepRig struct {
	env     *testsuite.TestWorkflowEnvironment
	start   time.Time
	starts  []RolloutInput
	at      []time.Time // when each rollout started
	running int
	most    int // rollouts running at once, at most
	trained int // trajectories the trainer got
	// versions, when set, is the weight versions a rollout's segments were sampled with (else v0).
	versions func(RolloutInput) []string
	batch    []gpu.TrajectoryRef // what the trainer got inline
	// unresolved, when set, says which rollouts earn reward 0 (else 1).
	unresolved func(RolloutInput) bool
	// result, when set and not nil for a rollout, is its result.
	result func(RolloutInput) *RolloutResult
}

var otherTask = task.Ref{ID: "fedcba9876543210", Name: "other", Bundle: testTask.Bundle}

func newStepRig(t *testing.T, aborted func(RolloutInput) bool) *stepRig {
	var s testsuite.WorkflowTestSuite
	r := &stepRig{env: s.NewTestWorkflowEnvironment(), trained: -1}
	r.env.RegisterActivity(&gpu.Activities{})
	Register(r.env)
	traj := store.Ref{URI: "file:///t", SHA256: "ab", Bytes: 1}
	r.env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).After(time.Minute).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		if aborted(rin) {
			return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeAborted, SandboxAttempts: 3, Error: "RoutingMissing: no routed experts"})
		}
		v := []string{"v0"}
		if r.versions != nil {
			v = r.versions(rin)
		}
		if r.result != nil && r.result(rin) != nil {
			return mockedRollout(ctx, rin, *r.result(rin))
		}
		if r.unresolved != nil && r.unresolved(rin) {
			return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeUnresolved, Scored: true, Trajectory: &traj, PolicyVersions: v})
		}
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeResolved, Scored: true, Reward: 1, Resolved: true, Trajectory: &traj, PolicyVersions: v})
	})
	r.env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var rin RolloutInput
		if err := args.Get(&rin); err != nil {
			t.Error(err)
		}
		r.starts, r.at = append(r.starts, rin), append(r.at, r.env.Now())
		r.running++
		r.most = max(r.most, r.running)
	})
	r.env.SetOnChildWorkflowCompletedListener(func(*workflow.Info, converter.EncodedValue, error) { r.running-- })
	r.env.OnActivity(gact.TrainerPPOStep, mock.Anything, mock.Anything).Return(func(_ context.Context, ti gpu.TrainInput) (gpu.Metrics, error) {
		r.trained, r.batch = len(ti.Trajectories), ti.Trajectories
		for _, ref := range ti.Chunks { // stored by storeOK
			var part []gpu.TrajectoryRef
			if err := memGet(strings.TrimPrefix(ref.URI, "file:///store/"), &part); err != nil {
				return nil, err
			}
			r.trained += len(part)
		}
		return gpu.Metrics{"policy_loss": 0.1}, nil
	})
	return r
}

func (r *stepRig) run(t *testing.T, in PPOStepInput) (StepRecord, error) {
	t.Helper()
	r.start = r.env.Now()
	r.env.ExecuteWorkflow(PPOStepWorkflow, in)
	if !r.env.IsWorkflowCompleted() {
		t.Fatal("the PPO step did not complete")
	}
	var rec StepRecord
	err := r.env.GetWorkflowError()
	if err == nil {
		err = r.env.GetWorkflowResult(&rec)
	}
	return rec, err
}

func stepIn(tasks ...task.Ref) PPOStepInput {
	return PPOStepInput{RolloutBatch: RolloutBatch{Campaign: "c", KeyPrefix: "c/e/", Tasks: tasks, Version: "v0", Concurrency: 2, TurnCap: 1, S: 20,
		Agent: activities.AgentSpec{Kind: activities.AgentPolicy, Temperature: 1, Inference: []string{"http://r0", "http://r1"}}},
		Step: 1, MaxFailedShare: 0.5}
}

// A flaky replica drops the routing of one sample's first two rollouts: the
// sample is started again (a new attempt, the other replica first, within
// the window of 2) and the step trains on every sample, recording 2 retries.
// Before retries, the sample was left out and the step trained on 2 of 3.
func TestPPOStepRetriesAbortedRolloutsUntilScored(t *testing.T) {
	// testTask is drawn twice (attempts 1 and 2): its first sample's retries
	// are attempts 3 and 5, never the second sample's.
	r := newStepRig(t, func(rin RolloutInput) bool {
		return rin.Task.ID == testTask.ID && (rin.Attempt == 1 || rin.Attempt == 3)
	})
	rec, err := r.run(t, stepIn(testTask, testTask, otherTask))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Rollouts != 3 || rec.Trained != 3 || r.trained != 3 || rec.Aborted != 0 {
		t.Fatalf("the batch shrank: %d rollouts, %d trained (trainer got %d), %d aborted", rec.Rollouts, rec.Trained, r.trained, rec.Aborted)
	}
	if rec.RetriesMax != 2 || len(rec.Retries) != 3 || rec.Retries[0] != 2 || rec.Retries[1] != 0 || rec.Retries[2] != 1 {
		t.Fatalf("retries %v (max %d): want 2 samples with none and 1 with 2", rec.Retries, rec.RetriesMax)
	}
	var attempts []int
	for _, s := range r.starts {
		if s.Task.ID == testTask.ID {
			attempts = append(attempts, s.Attempt)
		}
		first := s.Agent.Inference[0]
		if s.Attempt == 3 && first != "http://r1" || s.Attempt == 5 && first != "http://r0" || s.Attempt <= 2 && first != "http://r0" {
			t.Errorf("attempt %d tried %v first", s.Attempt, s.Agent.Inference)
		}
	}
	if len(r.starts) != 5 || fmt.Sprint(attempts) != "[1 2 3 5]" {
		t.Fatalf("%d rollouts started, attempts of the doubled task %v: want 5 and 1,2,3,5", len(r.starts), attempts)
	}
	if r.most > 2 {
		t.Fatalf("%d rollouts ran at once: concurrency is 2 and a retry takes a slot", r.most)
	}
	// Backoff: the retries start 10 s and 20 s after the aborts they follow.
	if gap := r.at[4].Sub(r.at[3]); gap < time.Minute+20*time.Second {
		t.Errorf("the second retry started %v after the first: no backoff", gap)
	}
}

// A sample whose routing never comes back is retried until the step's
// deadline, never after it, and then left out: 1 of 2 over max_failed_share
// 0.25 fails the step instead of training. Before retries it was started once.
func TestPPOStepLeavesOutAbortsAtTheDeadlineAndFails(t *testing.T) {
	r := newStepRig(t, func(rin RolloutInput) bool { return rin.Task.ID == testTask.ID })
	in := stepIn(testTask, otherTask)
	in.MaxFailedShare, in.DeadlineMinutes = 0.25, 10
	_, err := r.run(t, in)
	n := 0
	deadline := r.start.Add(10 * time.Minute)
	for i, s := range r.starts {
		if s.Task.ID != testTask.ID {
			continue
		}
		n++
		if r.at[i].After(deadline) {
			t.Errorf("attempt %d started %v after the deadline", s.Attempt, r.at[i].Sub(deadline))
		}
	}
	// Starts at 0, 70 s, 150 s, 250 s, 390 s, 570 s; the next (750 s) is past it.
	if n != 6 {
		t.Fatalf("the aborted sample was started %d times in 10 minutes, want 6", n)
	}
	if err == nil || errorType(err) != errs.PartialBatch || !strings.Contains(err.Error(), "1 of 2 rollouts left out (aborted 1 still at the step deadline after retries") {
		t.Fatalf("want the step to fail over max_failed_share, got %v", err)
	}
	if r.trained != -1 {
		t.Fatalf("trained on %d trajectories of a partial batch", r.trained)
	}
	// Its counts travel with the error, for the campaign's totals.
	var ae *temporal.ApplicationError
	var carried []CarriedRollout
	var got RefusedBatch
	if !errors.As(err, &ae) || ae.Details(&carried, &got) != nil || got != (RefusedBatch{Rollouts: 2, Aborted: 1, Trained: 1}) {
		t.Fatalf("the refused batch's counts: %+v, want 2 rollouts, 1 aborted, 1 it would have trained", got)
	}
}

// Results that come in while a batch chunk is being stored (90 s here)
// join the next chunk: the trainer gets every trajectory the step counted.
// Before the fix the flush dropped them and trained on fewer than Trained.
func TestPPOStepKeepsResultsThatArriveDuringAFlush(t *testing.T) {
	defer func(n int) { FlushEvery = n }(FlushEvery)
	FlushEvery = 1
	r := newStepRig(t, func(RolloutInput) bool { return false })
	r.env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).After(90 * time.Second).Return(storeOK)
	var tasks []task.Ref
	for i := 0; i < 8; i++ {
		tasks = append(tasks, task.Ref{ID: fmt.Sprintf("%016x", i+1), Name: fmt.Sprintf("t%d", i), Bundle: testTask.Bundle})
	}
	in := stepIn(tasks...)
	in.Concurrency = 4
	rec, err := r.run(t, in)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Trained != 8 || r.trained != 8 {
		t.Fatalf("step counted %d trained, the trainer got %d: want all 8", rec.Trained, r.trained)
	}
}

// A rollout whose episode handed off its context trains every context as a
// sample of its own, each with the rollout's reward; it counts once.
func TestHandoffSegmentsAreSamplesOfTheirOwn(t *testing.T) {
	var c collected
	first := store.Ref{URI: "t0"}
	c.add(RolloutResult{Scored: true, Outcome: OutcomeUnresolved, Reward: 0.25, PolicyVersions: []string{"v1"}, TaskID: "task",
		Trajectory: &first, Segments: []store.Ref{{URI: "t1"}, {URI: "t2"}}}, RolloutBatch{Version: "v1", Agent: activities.AgentSpec{Temperature: 1}})
	if c.Trained != 1 || len(c.batch) != 3 {
		t.Fatalf("trained %d rollouts as %d samples, want 1 as 3", c.Trained, len(c.batch))
	}
	for i, b := range c.batch {
		if b.Trajectory.URI != fmt.Sprintf("t%d", i) || b.Reward != 0.25 || b.PolicyVersion != "v1" || b.TaskID != "task" {
			t.Errorf("sample %d: %+v", i, b)
		}
	}
}

// A batch under the step's reward floor (ppo.collapse_share of the best
// earlier step's) is not trained on: the step fails RewardCollapse, naming
// its reward and the floor, and the trainer is never called. At or over the
// floor, and with no floor, the step trains.
func TestPPOStepUnderTheRewardFloorIsNotTrainedOn(t *testing.T) {
	for _, c := range []struct {
		floor    float64
		zeros    int // of 4 rollouts
		collapse bool
	}{{0.1, 4, true}, {0.3, 3, true}, {0.25, 3, false}, {0, 4, false}} {
		r := newStepRig(t, func(RolloutInput) bool { return false })
		n := 0
		r.unresolved = func(RolloutInput) bool { n++; return n <= c.zeros }
		in := stepIn(testTask, otherTask, testTask, otherTask)
		in.RewardFloor, in.FloorOf = c.floor, "collapse_share 0.1 of step 2's 0.700; its checkpoint c-e-step-0002"
		_, err := r.run(t, in)
		if !c.collapse {
			if err != nil || r.trained != 4 {
				t.Errorf("floor %v, %d of 4 at 0: %v, trainer got %d: want trained on all 4", c.floor, c.zeros, err, r.trained)
			}
			continue
		}
		if errorType(err) != errs.RewardCollapse || r.trained != -1 {
			t.Errorf("floor %v, %d of 4 at 0: error %v, trainer got %d: want RewardCollapse and no training", c.floor, c.zeros, err, r.trained)
			continue
		}
		want := fmt.Sprintf("mean reward %.3f on 4 trained rollouts (%d resolved), under the floor %.3f (collapse_share 0.1 of step 2's 0.700; its checkpoint c-e-step-0002)", float64(4-c.zeros)/4, 4-c.zeros, c.floor)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to say %q", err, want)
		}
	}
}

// TestPPOStepTrainsOnVerifierFailuresAtZero: a policy rollout whose verifier
// kept failing in its sandbox (the real RolloutWorkflow, Verify failing with
// a VerifierError on every try) is scored 0 and trains: in the batch at
// reward 0, counted as a verifier error, not as left out. Before
// verifier-error-scored it was left out as failed, so at max_failed_share 0
// the step refused its batch: an agent that hangs its verifier is never
// trained on its failure and stalls training.
func TestPPOStepTrainsOnVerifierFailuresAtZero(t *testing.T) {
	f := &fakeSandbox{}
	env := newEnv(t, f)
	traj := store.Ref{URI: "file:///hung", SHA256: "cd", Bytes: 1}
	env.OnActivity(act.AgentTurn, mock.Anything, mock.Anything).Return(f.turn)
	env.OnActivity(act.FinishEpisode, mock.Anything, mock.Anything).Return(activities.EpisodeResult{Trajectory: &traj, PolicyVersions: []string{"v0"}}, nil)
	env.OnActivity(act.Verify, mock.Anything, mock.Anything).Return(activities.VerifyResult{}, errs.Verifierf("tests/test.sh timed out after 5s (verifier.timeout_sec)"))
	in := stepIn(testTask, otherTask)
	hung := runRollout(t, env, RolloutInput{CampaignID: "c", Stage: "ppo", Step: 1, Task: testTask, Attempt: 1, Agent: in.Agent, TurnCap: 1, S: 20})
	if hung.Outcome != OutcomeVerifierError || !hung.Scored || hung.Reward != 0 || hung.Trajectory == nil {
		t.Errorf("the hung rollout: %s, scored %v, reward %v, trajectory %v: want a scored 0 with its trajectory", hung.Outcome, hung.Scored, hung.Reward, hung.Trajectory)
	}

	r := newStepRig(t, func(RolloutInput) bool { return false })
	r.result = func(rin RolloutInput) *RolloutResult {
		if rin.Task.ID != testTask.ID {
			return nil
		}
		return &hung
	}
	in.MaxFailedShare = 0
	rec, err := r.run(t, in)
	if err != nil {
		t.Fatalf("the step refused its batch: %v", err)
	}
	if rec.Trained != 2 || rec.Failed != 0 || rec.VerifierErrors != 1 || r.trained != 2 || rec.RewardMean != 0.5 {
		t.Fatalf("trained %d (trainer got %d), failed %d, verifier errors %d, mean reward %v: want both trained, the hung one at 0",
			rec.Trained, r.trained, rec.Failed, rec.VerifierErrors, rec.RewardMean)
	}
	for _, b := range r.batch {
		if b.Trajectory.URI == traj.URI && b.Reward != 0 {
			t.Errorf("the hung rollout trains at reward %v, want 0", b.Reward)
		}
	}
}
