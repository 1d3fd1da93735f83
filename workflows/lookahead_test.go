package workflows

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// aheadRig is a campaign of real PPO step workflows whose rollouts take
// three minutes and sample whatever inference serves at their start and
// end, and whose trainer's ppo_step takes two minutes and moves the version
// by one: a rollout started ahead sees the new weights land mid-episode.
type aheadRig struct {
	env     *testsuite.TestWorkflowEnvironment
	in      CampaignInput
	version int      // the trainer's
	keys    []string // ppo_step keys, in order
	batches map[string][]gpu.TrajectoryRef
	trained map[int]time.Time // step -> when its ppo_step ended
	started map[int][]time.Time
	fail    func(key string, call int) error
	broken  func(step, start int) bool // the rollout (the step's start-th) fails
}

func newAheadRig(t *testing.T, k, steps int) *aheadRig {
	tasks := []task.Ref{}
	for i := 0; i < 3; i++ {
		tasks = append(tasks, task.Ref{ID: fmt.Sprintf("%016x", i+1), Name: fmt.Sprintf("t%d", i), Bundle: testTask.Bundle})
	}
	r := &aheadRig{batches: map[string][]gpu.TrajectoryRef{}, trained: map[int]time.Time{}, started: map[int][]time.Time{}}
	r.env, r.in, _ = campaignSaveEnv(t, tasks, func(in gpu.SaveInput) (gpu.Checkpoint, error) {
		return gpu.Checkpoint{Name: in.Name, WeightVersion: fmt.Sprintf("v%d", r.version)}, nil
	})
	r.in.Config.PPO.Steps, r.in.Config.PPO.TasksPerStep, r.in.Config.PPO.Concurrency = steps, 3, 3
	r.in.Config.PPO.MaxStaleness, r.in.Config.PPO.MaxFailedShare = k, 0.5
	r.in.Config.Policy.Temperature = 1
	traj := store.Ref{URI: "file:///t", SHA256: "ab", Bytes: 1}
	r.env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		r.started[rin.Step] = append(r.started[rin.Step], workflow.Now(ctx))
		n := len(r.started[rin.Step])
		first := loaded[len(loaded)-1]
		if err := workflow.Sleep(ctx, 3*time.Minute); err != nil {
			return RolloutResult{}, err
		}
		if r.broken != nil && r.broken(rin.Step, n) { // reported to the step as a failed rollout reports itself
			return mockedRollout(ctx, rin, failedOutcome(rin, temporal.NewApplicationError("the sandbox broke", errs.Infra)))
		}
		vs := []string{first}
		if last := loaded[len(loaded)-1]; last != first {
			vs = append(vs, last) // new weights landed mid-episode
		}
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeResolved, Scored: true, Reward: 1, Trajectory: &traj, PolicyVersions: vs})
	})
	calls := map[string]int{}
	r.env.OnActivity(gact.TrainerPPOStep, mock.Anything, mock.Anything).After(2 * time.Minute).Return(func(_ context.Context, ti gpu.TrainInput) (gpu.Metrics, error) {
		calls[ti.Key]++
		if r.fail != nil {
			if err := r.fail(ti.Key, calls[ti.Key]); err != nil {
				return nil, err
			}
		}
		r.keys = append(r.keys, ti.Key)
		r.batches[ti.Key] = ti.Trajectories
		r.version++
		var step int
		fmt.Sscanf(ti.Key[strings.LastIndex(ti.Key, "/")+1:], "%d", &step)
		r.trained[step] = r.env.Now().Add(2 * time.Minute)
		return gpu.Metrics{"policy_loss": 0.1}, nil
	})
	return r
}

func (r *aheadRig) run(t *testing.T) (CampaignState, time.Duration) {
	t.Helper()
	start := r.env.Now()
	r.env.ExecuteWorkflow(CampaignWorkflow, r.in)
	if err := r.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res CampaignResult
	if err := r.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res.State, r.env.Now().Sub(start)
}

// At ppo.max_staleness 1 each step's rollouts start as soon as the step
// before has collected, while it trains: they sample the old weights, the
// new ones land mid-episode, and the step trains them on exactly the version
// the previous update produced, each sample once. The campaign takes less
// time than on-policy, which it must match in what it trains.
func TestPPOStepsStartAheadWhileThePreviousOneTrains(t *testing.T) {
	sync := newAheadRig(t, 0, 3)
	syncSt, syncTook := sync.run(t)
	r := newAheadRig(t, 1, 3)
	st, took := r.run(t)

	want := []string{"c/" + st.Epoch + "/ppo/1", "c/" + st.Epoch + "/ppo/2", "c/" + st.Epoch + "/ppo/3"}
	if !slices.Equal(r.keys, want) {
		t.Fatalf("ppo_step keys %v, want each step once: %v", r.keys, want)
	}
	if len(st.Steps) != 3 {
		t.Fatalf("steps %+v", st.Steps)
	}
	for i, s := range st.Steps {
		n := i + 1
		if s.Trained != 3 || s.Stale != 0 || len(r.batches[want[i]]) != 3 {
			t.Errorf("step %d: trained %d stale %d, trainer got %d", n, s.Trained, s.Stale, len(r.batches[want[i]]))
		}
		if wantV := fmt.Sprintf("v%d", i); s.PolicyVersion != wantV {
			t.Errorf("step %d trained on %s, want %s (the version step %d's update produced)", n, s.PolicyVersion, wantV, n-1)
		}
		if s.Ahead != (n > 1) {
			t.Errorf("step %d: ahead %v", n, s.Ahead)
		}
		for _, ref := range r.batches[want[i]] {
			// Sampled by the version trained or the one before it, never older.
			for _, v := range strings.Split(ref.PolicyVersion, ",") {
				if v != s.PolicyVersion && v != fmt.Sprintf("v%d", i-1) {
					t.Errorf("step %d (on %s) trained a segment of %s", n, s.PolicyVersion, v)
				}
			}
		}
		if n > 1 {
			// Started before the previous step's update ended.
			if first := r.started[n][0]; !first.Before(r.trained[n-1]) {
				t.Errorf("step %d's rollouts started at %v, after step %d trained (%v)", n, first, n-1, r.trained[n-1])
			}
			if len(s.Staleness) < 2 || s.Staleness[1] != 3 {
				t.Errorf("step %d: staleness %v, want 3 rollouts one version behind", n, s.Staleness)
			}
			spans := 0
			for _, ref := range r.batches[want[i]] {
				if ref.PolicyVersion == fmt.Sprintf("v%d,v%d", i-1, i) {
					spans++
				}
			}
			if spans != 3 {
				t.Errorf("step %d: %d of its rollouts went on with the new weights mid-episode, want 3", n, spans)
			}
		}
		if s.TrainSeconds != 120 || s.CollectSeconds < 180 {
			t.Errorf("step %d: collect %.0f s, train %.0f s", n, s.CollectSeconds, s.TrainSeconds)
		}
	}
	if !(took < syncTook) {
		t.Errorf("with rollouts started ahead the campaign took %v, on-policy %v", took, syncTook)
	}
	for i, s := range syncSt.Steps {
		if s.Ahead || s.PolicyVersion != fmt.Sprintf("v%d", i) || s.Trained != 3 || s.Staleness != nil {
			t.Errorf("on-policy step %d: %+v", i+1, s)
		}
	}
	t.Logf("campaign %v on-policy, %v with max_staleness 1", syncTook, took)
}

// A step started ahead is judged against the version the previous update
// will produce. When that never comes (the previous step failed and was
// skipped: nothing trained), the step is cancelled and sampled again on the
// served weights: nothing is trained under a wrong label, nothing twice.
func TestStepStartedAheadIsSampledAgainWhenThePreviousOneIsSkipped(t *testing.T) {
	r := newAheadRig(t, 1, 3)
	r.fail = func(key string, call int) error {
		if strings.HasSuffix(key, "/ppo/1") {
			return temporal.NewNonRetryableApplicationError("the trainer refused the batch", errs.BadInput, nil)
		}
		return nil
	}
	var seen CampaignStatus
	decideLater(t, r.env, time.Hour, UpdateSkip, &seen)
	st, _ := r.run(t)
	if seen.Failure == nil || seen.Failure.Stage != "ppo-1" {
		t.Fatalf("while paused: %+v", seen)
	}
	if len(st.Steps) != 3 || !st.Steps[0].Skipped {
		t.Fatalf("steps %+v", st.Steps)
	}
	s := st.Steps[1]
	if s.Ahead || s.PolicyVersion != "v0" || s.Trained != 3 || len(r.keys) != 2 || !strings.HasSuffix(r.keys[0], "/ppo/2") {
		t.Errorf("step 2 after the skip: %+v, trainer keys %v", s, r.keys)
	}
	if len(r.started[2]) != 6 {
		t.Fatalf("step 2's rollouts started %d times, want 3 ahead and 3 again", len(r.started[2]))
	}
	// The cancelled start's "collected" signal must not start step 3 beside
	// the new start of step 2: step 3 starts once that one has collected.
	if again, next := r.started[2][3], r.started[3][0]; next.Before(again.Add(3 * time.Minute)) {
		t.Errorf("step 3's rollouts started at %v, before step 2's new start (at %v) had collected", next, again)
	}
	if s3 := st.Steps[2]; !s3.Ahead || s3.PolicyVersion != "v1" || s3.Trained != 3 {
		t.Errorf("step 3: %+v, want started ahead of step 2's update, on v1", s3)
	}
	for _, ref := range r.batches[r.keys[0]] {
		if ref.PolicyVersion != "v0" {
			t.Errorf("step 2 trained a segment of %s on v0", ref.PolicyVersion)
		}
	}
}

// A step started ahead that refused its batch (PartialBatch) before the
// previous step failed and was skipped: it is discarded for the wrong
// version, and its failed rollouts still count in the campaign's totals.
func TestStepStartedAheadThatRefusedItsBatchCountsInTheTotals(t *testing.T) {
	r := newAheadRig(t, 1, 2)
	r.fail = func(key string, call int) error {
		if strings.HasSuffix(key, "/ppo/1") {
			return temporal.NewNonRetryableApplicationError("the trainer refused the batch", errs.BadInput, nil)
		}
		return nil
	}
	r.broken = func(step, start int) bool { return step == 2 && start <= 3 }
	var seen CampaignStatus
	decideLater(t, r.env, time.Hour, UpdateSkip, &seen)
	st, _ := r.run(t)
	if seen.Failure == nil || seen.Failure.Stage != "ppo-1" {
		t.Fatalf("while paused: %+v", seen)
	}
	if len(st.Steps) != 2 || !st.Steps[0].Skipped || st.Steps[1].Ahead || st.Steps[1].Trained != 3 || st.Steps[1].Failed != 0 {
		t.Fatalf("steps %+v", st.Steps)
	}
	if st.Failed != 3 || st.Aborted != 0 || st.Stale != 0 {
		t.Errorf("totals: failed %d, aborted %d, stale %d; want the discarded start's 3 failed", st.Failed, st.Aborted, st.Stale)
	}
}
