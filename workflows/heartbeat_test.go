package workflows

import (
	"context"
	"slices"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
)

// controlHeartbeats records the heartbeat timeout of every activity env
// starts on the control queue, by activity type.
func controlHeartbeats(env *testsuite.TestWorkflowEnvironment) map[string][]float64 {
	seen := map[string][]float64{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.TaskQueue == ids.ControlQueue {
			seen[info.ActivityType.Name] = append(seen[info.ActivityType.Name], info.HeartbeatTimeout.Seconds())
		}
	})
	return seen
}

// checkControlHeartbeats: each of want was started, and every control
// activity started carries a heartbeat timeout of at most ControlHeartbeat.
// Without one, an attempt lost with its worker (killed, or its completion
// lost across a server restart) holds its workflow until the start-to-close
// timeout: ten minutes for the campaign's and the sweeps' activities.
func checkControlHeartbeats(t *testing.T, seen map[string][]float64, want ...string) {
	t.Helper()
	for _, name := range want {
		if len(seen[name]) == 0 {
			t.Errorf("%s was never started on the control queue (started: %v)", name, seen)
		}
	}
	for name, hbs := range seen {
		if slices.ContainsFunc(hbs, func(s float64) bool { return s <= 0 || s > ControlHeartbeat.Seconds() }) {
			t.Errorf("%s started with heartbeat timeouts %v s, want each in (0, %v]", name, hbs, ControlHeartbeat)
		}
	}
}

func TestCampaignControlActivitiesCarryAHeartbeatTimeout(t *testing.T) {
	env, in, _ := campaignEnv(t, func(n, _ int) (StepRecord, error) {
		return StepRecord{Step: n, Trained: 4, Rollouts: 4, RewardMean: 0.5}, nil
	})
	seen := controlHeartbeats(env)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	checkControlHeartbeats(t, seen, "SampleTasks", "StoreJSON", "StoreEvents")
}

func TestEvalSweepControlActivitiesCarryAHeartbeatTimeout(t *testing.T) {
	env := sweepEnv()
	watchRollouts(env, env.Now())
	seen := controlHeartbeats(env)
	env.ExecuteWorkflow(EvalSweepWorkflow, EvalSweepInput{SweepID: "hb", Tasks: eightTasks(), Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 2})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	checkControlHeartbeats(t, seen, ActivitySweepTaskPage, ActivityBuildEvalReport, "StoreJSON")
}
