package workflows

import (
	"context"
	"testing"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
)

// TestReaperRetiresAGoneHost: a reap that no worker of the host takes asks
// RetireIdleHost (with the default wait unless the input sets one) and
// reports the retirement; a reap that ran never asks; a negative
// RetireAfterSec never retires and the run fails as before.
func TestReaperRetiresAGoneHost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reapErr   error
		after     float64
		wantAfter float64 // 0: RetireIdleHost is not called
	}{
		{"gone", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), 0, DefaultReaperRetireAfterSec},
		{"gone, own wait", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), 60, 60},
		{"reaped", nil, 0, 0},
		{"never", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), -1, 0},
		{"reap failed otherwise", temporal.NewApplicationError("docker ps", "InfraError"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Activities{})
			env.OnActivity(act.Reap, mock.Anything, mock.Anything).Return(activities.ReapResult{Kept: 1}, tc.reapErr)
			var asked []activities.RetireInput
			env.OnActivity(act.RetireIdleHost, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RetireInput) (activities.RetireResult, error) {
				asked = append(asked, in)
				return activities.RetireResult{Retired: true, Reason: "gone"}, nil
			}).Maybe()
			env.ExecuteWorkflow(ReaperWorkflow, ReaperInput{Host: "h1", TTLSec: 60, RetireAfterSec: tc.after})
			err := env.GetWorkflowError()
			var res activities.ReapResult
			if err == nil {
				env.GetWorkflowResult(&res)
			}
			if tc.wantAfter == 0 {
				if len(asked) != 0 || (tc.reapErr == nil) != (err == nil) || res.Retired != "" {
					t.Fatalf("asked %v, err %v, result %+v: want no retirement and the reap's own outcome", asked, err, res)
				}
				return
			}
			if err != nil || len(asked) != 1 || asked[0].Host != "h1" || asked[0].AfterSec != tc.wantAfter || res.Retired != "gone" {
				t.Fatalf("asked %v, err %v, result %+v: want one RetireIdleHost(h1, %v) and the retirement reported", asked, err, res, tc.wantAfter)
			}
		})
	}
}
