package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
)

// retentionRun resumes closedAfterStep1 with 5 steps, an eval every 2 and
// checkpoints.keep_last = keep; the store answers step-0003 pinned and the
// first deletion fails. It returns each prune's names and the final state.
func retentionRun(t *testing.T, keep int) ([][]string, CampaignState) {
	t.Helper()
	r := newResumeEnv(true)
	var asked [][]string
	r.env.OnActivity(gact.PruneCheckpoints, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.PruneInput) (gpu.PruneResult, error) {
		asked = append(asked, in.Names)
		if len(asked) == 1 {
			return gpu.PruneResult{}, temporal.NewNonRetryableApplicationError("store down", errs.BadInput, errors.New("store down"))
		}
		out := gpu.PruneResult{Deleted: []string{}}
		for _, n := range in.Names {
			if strings.HasSuffix(n, "step-0003") {
				out.Pinned = append(out.Pinned, n)
			} else {
				out.Deleted, out.Bytes = append(out.Deleted, n), out.Bytes+100
			}
		}
		return out, nil
	})
	r.env.OnWorkflow(EvalSweepWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in EvalSweepInput) (EvalSweepResult, error) {
		return EvalSweepResult{SweepID: in.SweepID}, nil
	})
	in := closedAfterStep1()
	in.Config.PPO.Steps, in.Config.Eval.Every, in.Config.Pools.Eval = 5, 2, []string{"heldout"}
	in.Config.Checkpoints.KeepLast = keep
	r.env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := r.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res CampaignResult
	r.env.GetWorkflowResult(&res)
	return asked, res.State
}

// TestCheckpointRetentionKeepsWhatResumesAndEvalsNeed: with keep_last = 1
// the step checkpoints past the newest are deleted, but never the newest
// (what a resume reloads), the final step's, one an eval recorded (steps 2
// and 4) or a pinned one (3, asked once); a failed deletion is asked again
// after the next step, and the report's state counts what was deleted.
func TestCheckpointRetentionKeepsWhatResumesAndEvalsNeed(t *testing.T) {
	asked, st := retentionRun(t, 1)
	want := [][]string{{"c/e1/step-0001"}, {"c/e1/step-0001"}, {"c/e1/step-0003"}}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("prunes asked %v, want %v", asked, want)
	}
	if st.Step != 5 || st.Phase != PhaseDone {
		t.Fatalf("campaign ended at %s step %d", st.Phase, st.Step)
	}
	r := st.Retention
	if r == nil || fmt.Sprint(r.Deleted) != "[c/e1/step-0001]" || fmt.Sprint(r.Pinned) != "[c/e1/step-0003]" || r.BytesFreed != 100 {
		t.Fatalf("retention record %+v", r)
	}
	if asked, st := retentionRun(t, 0); len(asked) != 0 || st.Retention != nil {
		t.Fatalf("keep_last = 0 deleted: %v %+v", asked, st.Retention)
	}
}

// With ppo.collapse_share, retention keeps the best step's checkpoint: the
// one a RewardCollapse pause names to go back to. Without it, it goes.
func TestRetentionKeepsTheBestStepUnderCollapseShare(t *testing.T) {
	c := &campaignRun{st: &CampaignState{Epoch: "e"}}
	c.cfg.Name, c.cfg.PPO.Steps, c.cfg.Checkpoints.KeepLast = "c", 6, 1
	for i, r := range []float64{0.5, 0.9, 0.6, 0.7} {
		c.st.Steps = append(c.st.Steps, StepRecord{Step: i + 1, Trained: 4, RewardMean: r, Checkpoint: c.key(fmt.Sprintf("step-%04d", i+1))})
	}
	c.st.Checkpoint = &gpu.Checkpoint{Name: c.key("step-0004")}
	if got := fmt.Sprint(c.prunable()); got != "[c/e/step-0001 c/e/step-0002 c/e/step-0003]" {
		t.Errorf("without collapse_share: %s", got)
	}
	c.cfg.PPO.CollapseShare = 0.1
	if got := fmt.Sprint(c.prunable()); got != "[c/e/step-0001 c/e/step-0003]" {
		t.Errorf("with collapse_share: %s, want step 2 (reward 0.9, the best) kept", got)
	}
}
