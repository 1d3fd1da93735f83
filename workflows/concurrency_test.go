package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

func eightTasks() []task.Ref {
	var ts []task.Ref
	for i := 0; i < 8; i++ {
		tk := testTask
		tk.ID, tk.Name = fmt.Sprintf("%016d", i), fmt.Sprintf("task-%d", i)
		ts = append(ts, tk)
	}
	return ts
}

// window counts the rollout children in flight (each takes a minute) and
// when each started.
type window struct {
	running, most int
	at            []time.Duration
}

func watchRollouts(env *testsuite.TestWorkflowEnvironment, start time.Time) *window {
	w := &window{}
	traj := store.Ref{URI: "file:///t", SHA256: "ab", Bytes: 1}
	env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).After(time.Minute).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeResolved, Scored: true, Resolved: true, Reward: 1, Trajectory: &traj, PolicyVersions: []string{"v0"}})
	})
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		if info.WorkflowType.Name == "RolloutWorkflow" {
			w.running++
			w.most = max(w.most, w.running)
			w.at = append(w.at, env.Now().Sub(start).Round(time.Second))
		}
	})
	env.SetOnChildWorkflowCompletedListener(func(info *workflow.Info, _ converter.EncodedValue, _ error) {
		if info.WorkflowType.Name == "RolloutWorkflow" {
			w.running--
		}
	})
	return w
}

// mockedRollout is what a mocked RolloutWorkflow returns: res with the
// rollout's IDs and task filled in, reported to a parent that asked
// (RolloutInput.ReportToParent) as the real one does.
func mockedRollout(ctx workflow.Context, rin RolloutInput, res RolloutResult) (RolloutResult, error) {
	rid := ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt)
	res.RolloutID, res.WorkflowID, res.TaskID, res.Name, res.Attempt = rid, ids.RolloutWorkflowID(rid), rin.Task.ID, rin.Task.Name, rin.Attempt
	if rin.ReportToParent {
		reportToParent(ctx, rin, res, nil)
	}
	mockClosed.put(res)
	return res, nil
}

// checkWindow asserts the shape every test below drives: 8 one-minute
// rollouts at width 2, widened to 5 at 0:30 and cut to 1 at 1:10. The raise
// starts 3 at once (not when a rollout ends), 2 more start at 1:00 when the
// first 2 end; after the cut nothing starts until the 5 in flight are down to
// 0 (2 left at 1:35), and the last starts alone at 2:00.
func checkWindow(t *testing.T, w *window, at35, at95 int) {
	t.Helper()
	want := []time.Duration{0, 0, 30 * time.Second, 30 * time.Second, 30 * time.Second, time.Minute, time.Minute, 2 * time.Minute}
	if fmt.Sprint(w.at) != fmt.Sprint(want) {
		t.Errorf("rollouts started at %v, want %v", w.at, want)
	}
	if w.most != 5 || at35 != 5 || at95 != 2 {
		t.Errorf("in flight: %d at 0:35 (want 5), %d at 1:35 (want 2), at most %d (want 5)", at35, at95, w.most)
	}
}

// sweepEnv runs an eval sweep on the sweep fakes, its stores answered.
func sweepEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	registerSweepFakes(env)
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK)
	return env
}

// An operator's set_concurrency update on a running eval sweep widens and
// narrows its window; its progress query and the update's answer show the
// width; 0 is rejected.
func TestSetConcurrencyReachesARunningEvalSweep(t *testing.T) {
	env := sweepEnv()
	w := watchRollouts(env, env.Now())
	update := func(after time.Duration, n int, rejected bool) {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(UpdateSetConcurrency, fmt.Sprint("u", n), &testsuite.TestUpdateCallback{
				OnReject: func(err error) {
					if !rejected {
						t.Errorf("set_concurrency %d rejected: %v", n, err)
					}
				},
				OnAccept: func() {
					if rejected {
						t.Errorf("set_concurrency %d accepted", n)
					}
				},
				OnComplete: func(v any, err error) {
					if p, ok := v.(Progress); err != nil || !ok || p.Concurrency != n {
						t.Errorf("set_concurrency %d answered %+v, %v", n, v, err)
					}
				}}, n)
		}, after)
	}
	var at35, at95 Progress
	query := func(after time.Duration, p *Progress) {
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow(QueryProgress)
			if err == nil {
				err = v.Get(p)
			}
			if err != nil {
				t.Error(err)
			}
		}, after)
	}
	update(10*time.Second, 0, true)
	update(30*time.Second, 5, false)
	query(35*time.Second, &at35)
	update(70*time.Second, 1, false)
	query(95*time.Second, &at95)
	env.ExecuteWorkflow(EvalSweepWorkflow, EvalSweepInput{SweepID: "s", Tasks: eightTasks(), Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 2})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if at35.Concurrency != 5 || at95.Concurrency != 1 {
		t.Errorf("progress shows width %d at 0:35 and %d at 1:35, want 5 and 1", at35.Concurrency, at95.Concurrency)
	}
	checkWindow(t, w, at35.Running, at95.Running)
}

// The set_concurrency signal (what a campaign sends) reaches a running PPO
// step the same way.
func TestSetConcurrencySignalReachesARunningPPOStep(t *testing.T) {
	r := newStepRig(t, func(RolloutInput) bool { return false })
	w := watchRollouts(r.env, r.env.Now())
	var at35, at95 int
	r.env.RegisterDelayedCallback(func() { r.env.SignalWorkflow(SignalSetConcurrency, 5) }, 30*time.Second)
	r.env.RegisterDelayedCallback(func() { at35 = w.running }, 35*time.Second)
	r.env.RegisterDelayedCallback(func() { r.env.SignalWorkflow(SignalSetConcurrency, 0) }, 60*time.Second) // ignored
	r.env.RegisterDelayedCallback(func() { r.env.SignalWorkflow(SignalSetConcurrency, 1) }, 70*time.Second)
	r.env.RegisterDelayedCallback(func() { at95 = w.running }, 95*time.Second)
	rec, err := r.run(t, stepIn(eightTasks()...))
	if err != nil || rec.Trained != 8 {
		t.Fatalf("step: %+v %v", rec, err)
	}
	checkWindow(t, w, at35, at95)
}

// A campaign's set_concurrency reaches the PPO step it is running (the step
// is a real PPOStepWorkflow; its rollouts are mocked), and the status shows it.
func TestCampaignSetConcurrencyReachesItsRunningStep(t *testing.T) {
	env, in, _ := campaignBaseEnv(t, eightTasks())
	in.Config.PPO.Steps, in.Config.PPO.TasksPerStep, in.Config.PPO.Concurrency, in.Config.Policy.Temperature = 1, 8, 2, 1
	env.OnActivity(gact.TrainerPPOStep, mock.Anything, mock.Anything).Return(gpu.Metrics{"policy_loss": 0.1}, nil)
	w := watchRollouts(env, env.Now())
	set := func(after time.Duration, n int) {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(UpdateSetConcurrency, fmt.Sprint("u", n), &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("set_concurrency %d rejected: %v", n, err) }, OnAccept: func() {},
				OnComplete: func(v any, err error) {
					if s, ok := v.(CampaignStatus); err != nil || !ok || s.Concurrency != n {
						t.Errorf("set_concurrency %d answered %+v, %v", n, v, err)
					}
				}}, n)
		}, after)
	}
	var at35, at95 int
	set(30*time.Second, 5)
	env.RegisterDelayedCallback(func() { at35 = w.running }, 35*time.Second)
	set(70*time.Second, 1)
	env.RegisterDelayedCallback(func() { at95 = w.running }, 95*time.Second)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res CampaignResult
	if err := env.GetWorkflowResult(&res); err != nil || res.State.Step != 1 || res.State.Concurrency != 1 {
		t.Fatalf("campaign: %+v %v", res.State, err)
	}
	checkWindow(t, w, at35, at95)
}

// With results pending past FlushEvery, the sweep writes them as a chunk
// before it starts more rollouts, not only at continue-as-new or the end:
// no chunk (one activity input) grows with the run.
func TestEvalSweepFlushesResultsAsTheyPileUp(t *testing.T) {
	defer func(n int) { FlushEvery = n }(FlushEvery)
	FlushEvery = 2
	env := sweepEnv()
	watchRollouts(env, env.Now())
	env.ExecuteWorkflow(EvalSweepWorkflow, EvalSweepInput{SweepID: "flush", Tasks: eightTasks(), Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 2})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	total, most, chunks := 0, 0, 0
	for n := 0; ; n++ {
		var chunk []RolloutResult
		if memGet(ResultChunkKey("flush", n), &chunk) != nil {
			break
		}
		chunks, total, most = chunks+1, total+len(chunk), max(most, len(chunk))
	}
	if total != 8 || chunks < 3 || most > FlushEvery+2 {
		t.Errorf("%d results in %d chunks (largest %d), want 8 in at least 3 chunks of at most %d", total, chunks, most, FlushEvery+2)
	}
}

// TestFinalWidthTakesSignalsFromTheLastTask: set_concurrency signals that
// come in with the workflow task that ends a run (here the "go" signal; in a
// sweep, step or warm-up the one that continues as new) are in the width the
// run hands on. Before final, the receiver held the first and the second
// stayed in the channel: the run handed on 2.
func TestFinalWidthTakesSignalsFromTheLastTask(t *testing.T) {
	wf := func(ctx workflow.Context) (int, error) {
		k, err := newConcurrency(ctx, 2, func() Progress { return Progress{} })
		if err != nil {
			return 0, err
		}
		workflow.GetSignalChannel(ctx, "go").Receive(ctx, nil)
		return k.final(ctx), nil
	}
	for _, signals := range [][]int{{7}, {7, 9}, {7, 0}} {
		env := (&testsuite.WorkflowTestSuite{}).NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "finalWidth"})
		env.RegisterDelayedCallback(func() {
			for _, n := range signals {
				env.SignalWorkflowSkippingWorkflowTask(SignalSetConcurrency, n)
			}
			env.SignalWorkflow("go", nil)
		}, time.Second)
		env.ExecuteWorkflow("finalWidth")
		var got int
		if err := env.GetWorkflowResult(&got); err != nil {
			t.Fatal(err)
		}
		want := signals[len(signals)-1]
		if want == 0 { // out of range: ignored
			want = signals[len(signals)-2]
		}
		if got != want {
			t.Errorf("signals %v: width handed on %d, want %d", signals, got, want)
		}
	}
}
