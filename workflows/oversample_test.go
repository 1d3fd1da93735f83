package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// oversampleRig is a campaign of real PPO step workflows at
// tasks_per_step 3 and ppo.oversample 2 (concurrency 5: every rollout of a
// step starts at once). Each step draws tasks of its own; the first task a
// step draws takes 6 minutes, the second of step 1 takes 12, every other
// one 3; ppo_step takes 2 minutes and moves the version by one.
type oversampleRig struct {
	*aheadRig
	drawn   map[string]int // task ID -> the step that drew it
	longest string         // step 1's 12-minute task
	// zero, when set, says which rollouts earn 0 (else 1), asked as each ends.
	zero func(RolloutInput) bool
	// dur, when set, says how long a rollout runs (0: the default above);
	// failed, which rollouts report a broken sandbox as they end.
	dur    func(RolloutInput) time.Duration
	failed func(RolloutInput) bool
}

func newOversampleRig(t *testing.T, k int) *oversampleRig {
	r := &oversampleRig{aheadRig: &aheadRig{batches: map[string][]gpu.TrajectoryRef{}, trained: map[int]time.Time{}, started: map[int][]time.Time{}},
		drawn: map[string]int{}}
	traj := store.Ref{URI: "file:///t", SHA256: "ab", Bytes: 1}
	// Registered, not mocked: the test environment tells a parent that a
	// mocked child started only once it has returned.
	rollout := func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		r.started[rin.Step] = append(r.started[rin.Step], workflow.Now(ctx))
		first := loaded[len(loaded)-1]
		d := 3 * time.Minute
		switch {
		case rin.Task.ID == r.longest:
			d = 12 * time.Minute
		case strings.HasSuffix(rin.Task.ID, "00000000"):
			d = 6 * time.Minute
		}
		if r.dur != nil {
			if o := r.dur(rin); o > 0 {
				d = o
			}
		}
		if err := workflow.Sleep(ctx, d); err != nil {
			return RolloutResult{}, err
		}
		if r.failed != nil && r.failed(rin) {
			return mockedRollout(ctx, rin, failedOutcome(rin, temporal.NewApplicationError("the sandbox broke", errs.Infra)))
		}
		vs := []string{first}
		if last := loaded[len(loaded)-1]; last != first {
			vs = append(vs, last)
		}
		if r.zero != nil && r.zero(rin) {
			return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeUnresolved, Scored: true, Trajectory: &traj,
				PolicyVersions: vs, Turns: int(d / time.Minute)})
		}
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeResolved, Scored: true, Reward: 1, Trajectory: &traj,
			PolicyVersions: vs, Turns: int(d / time.Minute)})
	}
	registerFirst = func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterWorkflowWithOptions(rollout, workflow.RegisterOptions{Name: "RolloutWorkflow", DisableAlreadyRegisteredCheck: true})
	}
	r.env, r.in, _ = campaignSaveEnv(t, nil, func(in gpu.SaveInput) (gpu.Checkpoint, error) {
		return gpu.Checkpoint{Name: in.Name, WeightVersion: fmt.Sprintf("v%d", r.version)}, nil
	})
	sampleTasks = func(in activities.SampleInput) []task.Ref {
		var step int
		fmt.Sscanf(in.Seed[strings.LastIndex(in.Seed, "/")+1:], "%d", &step)
		var out []task.Ref
		for i := 0; i < in.N; i++ {
			id := fmt.Sprintf("%08x%08x", step, i)
			r.drawn[id] = step
			out = append(out, task.Ref{ID: id, Name: fmt.Sprintf("s%dt%d", step, i), Bundle: testTask.Bundle})
		}
		return out
	}
	r.longest = fmt.Sprintf("%08x%08x", 1, 1)
	r.in.Config.PPO.Steps, r.in.Config.PPO.TasksPerStep, r.in.Config.PPO.Oversample, r.in.Config.PPO.Concurrency = 4, 3, 2, 5
	r.in.Config.PPO.MaxStaleness, r.in.Config.PPO.MaxFailedShare = k, 0.5
	r.in.Config.Policy.Temperature = 1

	// The test environment cancels a running workflow by ID itself, and asks
	// this for one that has closed.
	r.env.OnRequestCancelExternalWorkflow(mock.Anything, mock.Anything, mock.Anything).Return(errors.New("workflow execution already completed")).Maybe()
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
		return gpu.Metrics{"policy_loss": 0.1}, nil
	})
	return r
}

// At ppo.oversample 2 a step starts 5 rollouts and trains once 3 have an
// outcome: the 6-minute rollouts still running are not cancelled but
// carried into the next step, which trains them one version behind; step
// 1's 12-minute rollout, carried twice, is two versions behind in step 3
// and counted stale there, not trained. Every sample drawn is trained once
// or counted once, and the last step waits for all of its rollouts.
func TestOversampleCarriesLongRolloutsIntoTheNextStep(t *testing.T) {
	r := newOversampleRig(t, 1)
	st, _ := r.run(t)
	if len(st.Steps) != 4 {
		t.Fatalf("steps %+v", st.Steps)
	}
	if st.CarriedDropped != 0 || len(st.Carried) != 0 {
		t.Errorf("campaign: carried dropped %d, left carried %v", st.CarriedDropped, st.Carried)
	}
	trainedIn := map[string][]int{} // task ID -> the steps that trained it
	for i, s := range st.Steps {
		n := i + 1
		for _, ref := range r.batches[fmt.Sprintf("c/%s/ppo/%d", st.Epoch, n)] {
			trainedIn[ref.TaskID] = append(trainedIn[ref.TaskID], n)
			if from := r.drawn[ref.TaskID]; from != n {
				// Carried: sampled one version behind the step's, the new one landing mid-episode.
				if want := fmt.Sprintf("v%d,v%d", n-2, n-1); ref.PolicyVersion != want {
					t.Errorf("step %d trained step %d's %s sampled with %s, want %s", n, from, ref.TaskID, ref.PolicyVersion, want)
				}
			}
		}
		if s.Ahead {
			t.Errorf("step %d started ahead: oversampling at max_staleness 1 never does", n)
		}
		t.Logf("step %d: trained %d (carried in %d), carried %d, stale %d (carried %d), dropped %d, collect %.0f s, turns trained %v finished %v",
			n, s.Trained, s.CarriedIn, s.Carried, s.Stale, s.CarriedStale, s.Dropped, s.CollectSeconds, s.TurnsTrained, s.TurnsFinished)
	}
	// (a) A step ends at 3 outcomes with its 6-minute rollouts still running.
	s1 := st.Steps[0]
	if s1.Carried != 2 || s1.CollectSeconds >= 360 || s1.Rollouts != 3 || s1.Trained != 3 {
		t.Errorf("step 1: carried %d, %d rollouts, trained %d, collected in %.0f s; want 2 carried, 3 trained in 3 minutes", s1.Carried, s1.Rollouts, s1.Trained, s1.CollectSeconds)
	}
	// (b) Step 1's 6-minute rollout trains in step 2, one version behind; its 12-minute one is carried on.
	s2, s3 := st.Steps[1], st.Steps[2]
	if s2.CarriedIn != 1 || s2.Carried != 2 || len(s2.Staleness) < 2 || s2.Staleness[1] != 1 {
		t.Errorf("step 2: carried in %d, carried %d, staleness %v; want step 1's 6-minute rollout trained one behind, 2 carried on", s2.CarriedIn, s2.Carried, s2.Staleness)
	}
	if got := trainedIn[fmt.Sprintf("%08x%08x", 1, 0)]; len(got) != 1 || got[0] != 2 {
		t.Errorf("step 1's 6-minute rollout trained in steps %v, want [2]", got)
	}
	// Carried twice: two versions behind in step 3, stale, said so.
	if s3.CarriedStale != 1 || s3.Stale != 1 || len(trainedIn[r.longest]) != 0 {
		t.Errorf("step 3: carried stale %d, stale %d; step 1's 12-minute rollout trained in %v", s3.CarriedStale, s3.Stale, trainedIn[r.longest])
	}
	// The last step draws 3 less what it was handed, and waits for all.
	if s4 := st.Steps[3]; s4.Carried != 0 || s4.Dropped != 0 || s4.Rollouts != 3 || s4.Trained != 3 {
		t.Errorf("last step: %d rollouts, trained %d, carried %d, dropped %d", s4.Rollouts, s4.Trained, s4.Carried, s4.Dropped)
	}
	// (c) Every sample drawn trained exactly once, but the one counted stale.
	for id, from := range r.drawn {
		if got := trainedIn[id]; id != r.longest && len(got) != 1 {
			t.Errorf("step %d's sample %s trained in steps %v, want once", from, id, got)
		}
	}
	// The turn histograms show the long rollouts in what trained.
	if h := s2.TurnsTrained; len(h) <= 6 || h[6] != 1 {
		t.Errorf("step 2: turns of trained rollouts %v, want the 6-turn one", h)
	}
	if r.env.AssertExpectations(t); t.Failed() {
		return
	}
}

// At max_staleness 2 oversampling steps also start ahead while the one
// before trains: the step started ahead adopts what the step before handed
// on, still each sample once (step 1's 12-minute rollout, 3 versions behind
// at the end, is counted stale).
func TestOversampleWithStepsStartedAhead(t *testing.T) {
	r := newOversampleRig(t, 2)
	st, _ := r.run(t)
	if len(st.Steps) != 4 {
		t.Fatalf("steps %+v", st.Steps)
	}
	trained := map[string]int{}
	for _, b := range r.batches {
		for _, ref := range b {
			trained[ref.TaskID]++
		}
	}
	in, stale := 0, 0
	for i, s := range st.Steps {
		if s.Ahead != (i > 0) {
			t.Errorf("step %d: ahead %v", i+1, s.Ahead)
		}
		in, stale = in+s.CarriedIn, stale+s.CarriedStale
	}
	if in != 3 || stale != 1 || st.CarriedDropped != 0 {
		t.Errorf("carried in %d, carried stale %d, dropped %d; want 3, 1, 0", in, stale, st.CarriedDropped)
	}
	for id, from := range r.drawn {
		if want := map[bool]int{true: 0, false: 1}[id == r.longest]; trained[id] != want {
			t.Errorf("step %d's sample %s trained %d times, want %d", from, id, trained[id], want)
		}
	}
}

// A step that fails after handing rollouts on cancels what was carried into
// it and out of it, waits for them to close and counts them dropped: the
// retry starts the step's rollout IDs again, and finds none of them taken.
func TestOversampleFailedStepDropsItsCarriedRollouts(t *testing.T) {
	r := newOversampleRig(t, 1)
	r.fail = func(key string, call int) error {
		if strings.HasSuffix(key, "/ppo/2") && call == 1 {
			return temporal.NewNonRetryableApplicationError("the trainer refused the batch", errs.BadInput, nil)
		}
		return nil
	}
	var seen CampaignStatus
	// Step 2 fails at 10:00 (collected at 8:00, 2 minutes' update) while its
	// 6-minute rollout, started at 5:00, still runs.
	decideLater(t, r.env, 10*time.Minute+30*time.Second, UpdateRetry, &seen)
	st, _ := r.run(t)
	if seen.Failure == nil || seen.Failure.Stage != "ppo-2" || seen.CarriedDropped != 3 || seen.Carried != 0 {
		t.Fatalf("at the decision: %+v", seen)
	}
	if len(st.Steps) != 4 {
		t.Fatalf("steps %+v", st.Steps)
	}
	// Into step 2: step 1's 6- and 12-minute rollouts; out of it: the
	// 12-minute one and step 2's own 6-minute one.
	if st.CarriedDropped != 3 || len(st.Carried) != 0 {
		t.Errorf("carried dropped %d, left %v; want 3, none", st.CarriedDropped, st.Carried)
	}
	trained := map[string]int{}
	for _, b := range r.batches {
		for _, ref := range b {
			trained[ref.TaskID]++
		}
	}
	for id, n := range trained {
		if n != 1 {
			t.Errorf("sample %s trained %d times", id, n)
		}
	}
	for _, s := range st.Steps {
		if s.Failed != 0 || s.Stale != 0 {
			t.Errorf("step %d: failed %d, stale %d (a rollout ID found taken counts failed)", s.Step, s.Failed, s.Stale)
		}
	}
	if s2 := st.Steps[1]; s2.CarriedIn != 0 || s2.Trained < 3 {
		t.Errorf("step 2 again: carried in %d, trained %d; want a fresh start", s2.CarriedIn, s2.Trained)
	}
}

// A step that refuses its batch (RewardCollapse here; PartialBatch takes the
// same path) before training tells the campaign nothing of the rollouts it
// would have carried on: its error carries them, and the campaign drops them
// with what was carried into it and had not reported to it. Before, step
// 2's own 6-minute rollout ran on unowned, and the retry found its ID taken
// (counted failed).
func TestOversampleRefusedBatchDropsWhatItWouldCarry(t *testing.T) {
	r := newOversampleRig(t, 1)
	r.in.Config.PPO.CollapseShare = 0.9
	zero := true
	r.zero = func(rin RolloutInput) bool { return zero && r.drawn[rin.Task.ID] == 2 }
	// Step 2 (from 5:00) has its three outcomes at 8:00: step 1's 6-minute
	// rollout (1) and two of its own 3-minute ones (0), under 0.9 of step
	// 1's 1.0. Still running: step 1's 12-minute one and step 2's 6-minute one.
	r.env.RegisterDelayedCallback(func() { zero = false }, 8*time.Minute+20*time.Second)
	var seen CampaignStatus
	decideLater(t, r.env, 8*time.Minute+30*time.Second, UpdateRetry, &seen)
	st, _ := r.run(t)
	if f := seen.Failure; f == nil || f.Stage != "ppo-2" || f.Type != errs.RewardCollapse {
		t.Fatalf("at the decision: %+v", seen)
	}
	// Into step 2: step 1's 6- and 12-minute rollouts; out of it: the
	// 12-minute one and step 2's own 6-minute one. The 6-minute one carried
	// in reported to step 2: its outcome is the refused batch's (counted
	// with it), not dropped as well.
	if seen.CarriedDropped != 2 || seen.Carried != 0 || st.CarriedDropped != 2 {
		t.Errorf("carried dropped %d at the decision, %d at the end; want 2", seen.CarriedDropped, st.CarriedDropped)
	}
	if len(st.Steps) != 4 || st.Steps[1].Trained < 3 || st.Steps[1].CarriedIn != 0 {
		t.Fatalf("steps %+v", st.Steps)
	}
	for _, s := range st.Steps {
		if s.Failed != 0 || s.Stale != 0 {
			t.Errorf("step %d: failed %d, stale %d (a rollout ID found taken counts failed)", s.Step, s.Failed, s.Stale)
		}
	}
}

// A step started ahead that refused its batch while the step before it
// trained leaves running what it would have carried on, its own rollouts
// among them. When the step before then fails, the campaign cancels those
// too and counts them dropped once: the adopted rollout that reported to
// the refused batch is counted there, not dropped as well. Before, the
// refused step's own rollout ran on unowned, and the same step's next start
// found its rollout ID taken (counted failed).
func TestStepStartedAheadThatRefusedLeavesNothingRunning(t *testing.T) {
	r := newOversampleRig(t, 2)
	// Step 1 (from 0:00) collects at 3:00 and hands on its 4-minute rollout
	// and its 12-minute one; its update fails at 5:00. Step 2, started ahead
	// at 3:00, draws 3: its second and third fail at once, step 1's
	// 4-minute rollout reports at 4:00, and it refuses its batch (2 of 3
	// failed) with its own 6-minute rollout and step 1's 12-minute one
	// still running.
	breaks, _ := r.refusingAhead(func(id string) bool { return !strings.HasSuffix(id, "00000000") }) // its second and third
	r.dur = func(rin RolloutInput) time.Duration {
		switch {
		case r.drawn[rin.Task.ID] == 1 && strings.HasSuffix(rin.Task.ID, "00000000"):
			return 4 * time.Minute
		case breaks(rin):
			return time.Second
		}
		return 0
	}
	var seen CampaignStatus // retried at 5:30, while step 2's own 6-minute rollout runs (to 9:00)
	decideLater(t, r.env, 5*time.Minute+30*time.Second, UpdateRetry, &seen)
	st, _ := r.run(t)
	if seen.Failure == nil || seen.Failure.Stage != "ppo-1" {
		t.Fatalf("at the decision: %+v", seen)
	}
	// Dropped: step 1's 12-minute rollout and step 2's own 6-minute one.
	if seen.CarriedDropped != 2 || st.CarriedDropped != 2 {
		t.Errorf("carried dropped %d at the decision, %d at the end; want 2", seen.CarriedDropped, st.CarriedDropped)
	}
	if st.Failed != 2 {
		t.Errorf("failed in all %d; want the refused batch's 2", st.Failed)
	}
	if len(st.Steps) != 4 {
		t.Fatalf("steps %+v", st.Steps)
	}
	for _, s := range st.Steps { // (step 1's 12-minute rollout is stale at the end, as without the failure)
		if s.Failed != 0 {
			t.Errorf("step %d: failed %d (a rollout ID found taken counts failed)", s.Step, s.Failed)
		}
	}
}

// A step that fails having handed nothing on still ends the step started
// ahead: here that step had refused its batch (2 of 3 outcomes failed) with
// two of its own rollouts running. Before, it outlived the failure: its own
// rollouts ran on unowned, and after the retry the campaign took it up again
// and paused a second time on its refusal from before the retry.
func TestFailedStepEndsTheStepStartedAheadThatCarriedNothing(t *testing.T) {
	r := newOversampleRig(t, 2)
	// Step 1's five rollouts all take 3 minutes: it hands nothing on. Step
	// 2, started ahead at 3:00, draws 5: its second to fourth fail at once
	// the first time, its first and fifth run 6 minutes. Step 1's first
	// update fails at 5:00; the retry is decided at 5:30.
	breaks, first := r.refusingAhead(func(id string) bool { return !strings.HasSuffix(id, "0") && !strings.HasSuffix(id, "4") })
	r.dur = func(rin RolloutInput) time.Duration {
		switch {
		case r.drawn[rin.Task.ID] == 1:
			return 3 * time.Minute
		case breaks(rin):
			return time.Second
		case r.drawn[rin.Task.ID] == 2 && first(rin.Task.ID):
			return 6 * time.Minute
		}
		return 0
	}
	var seen CampaignStatus
	decideLater(t, r.env, 5*time.Minute+30*time.Second, UpdateRetry, &seen)
	st, _ := r.run(t)
	if seen.Failure == nil || seen.Failure.Stage != "ppo-1" || seen.CarriedDropped != 2 {
		t.Fatalf("at the decision: %+v; want step 1's failure and step 2's two running rollouts dropped", seen)
	}
	if len(st.Steps) != 4 || st.Failed != 3 || st.CarriedDropped != 2 {
		t.Fatalf("failed in all %d (want the refused batch's 3), carried dropped %d (want 2), steps %+v", st.Failed, st.CarriedDropped, st.Steps)
	}
	for _, s := range st.Steps {
		if s.Failed != 0 {
			t.Errorf("step %d: failed %d (a rollout ID found taken counts failed)", s.Step, s.Failed)
		}
	}
}

// refusingAhead: step 1's first update fails, and the rollouts of step 2's
// tasks that pick chooses report a broken sandbox the first time they end
// (breaks says which will); first says a step-2 task has not ended yet.
func (r *oversampleRig) refusingAhead(pick func(id string) bool) (breaks func(RolloutInput) bool, first func(id string) bool) {
	ended := map[string]bool{}
	breaks = func(rin RolloutInput) bool {
		return r.drawn[rin.Task.ID] == 2 && !ended[rin.Task.ID] && pick(rin.Task.ID)
	}
	r.failed = func(rin RolloutInput) bool {
		b := breaks(rin)
		ended[rin.Task.ID] = true
		return b
	}
	r.fail = func(key string, call int) error {
		if strings.HasSuffix(key, "/ppo/1") && call == 1 {
			return temporal.NewNonRetryableApplicationError("the trainer refused the batch", errs.BadInput, nil)
		}
		return nil
	}
	return breaks, func(id string) bool { return !ended[id] }
}

// The turn statistics the report and TensorBoard show.
func TestTurnStatsAndOversampleScalars(t *testing.T) {
	if n, mean, p90 := TurnStats([]int{0, 0, 0, 8, 0, 0, 2}); n != 10 || mean != 3.6 || p90 != 6 {
		t.Errorf("TurnStats: n %d, mean %v, p90 %d; want 10, 3.6, 6", n, mean, p90)
	}
	if n, _, p90 := TurnStats([]int{0, 9, 1}); n != 10 || p90 != 1 {
		t.Errorf("TurnStats: n %d, p90 %d; want 10, 1 (9 of 10 at 1 turn)", n, p90)
	}
	sc := StepScalars(StepRecord{Carried: 2, CarriedIn: 1, TurnsTrained: []int{0, 0, 1}, TurnsFinished: []int{0, 0, 1, 1}})
	if sc["rollout/carried"] != 2 || sc["rollout/carried_in"] != 1 || sc["rollout/turns_finished_mean"] != 2.5 || sc["rollout/turns_trained_p90"] != 2 {
		t.Errorf("scalars %v", sc)
	}
	if _, ok := StepScalars(StepRecord{Trained: 3})["rollout/carried"]; ok {
		t.Errorf("a step without oversampling has oversampling tags")
	}
}
