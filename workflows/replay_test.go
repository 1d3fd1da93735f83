package workflows

import (
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays histories recorded from real runs (the
// dev server, Docker and the oracle, scripted and sweep paths). A workflow
// change that would break running executions fails here: guard it with
// workflow.GetVersion and keep these files.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("recorded histories missing: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			Register(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// recordedShape is what the replay test knows of one recorded history.
type recordedShape struct {
	file, workflowType, last string
	continued                bool // the run was started by continue-as-new
}

func recordedShapes(t *testing.T) []recordedShape {
	t.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []recordedShape
	for _, f := range files {
		h, err := client.HistoryFromJSON(mustOpen(t, f), client.HistoryJSONOptions{})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		ev := h.GetEvents()
		a := ev[0].GetWorkflowExecutionStartedEventAttributes()
		out = append(out, recordedShape{file: filepath.Base(f), workflowType: a.GetWorkflowType().GetName(),
			last: ev[len(ev)-1].GetEventType().String(), continued: a.GetContinuedExecutionRunId() != ""})
	}
	return out
}

func mustOpen(t *testing.T, f string) *os.File {
	t.Helper()
	r, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestEveryWorkflowTypeHasARecordedHistory: a workflow type registered in All
// without a recorded history would change unguarded. Record one (the
// T1FLOW_RECORD_HISTORY=1 integration tests) when adding a type. Also kept:
// a failed run (an error path) and, of the campaign, the eval sweep, the PPO
// step and the critic warm-up, a run that continued as new and one started
// by continue-as-new.
func TestEveryWorkflowTypeHasARecordedHistory(t *testing.T) {
	shapes := recordedShapes(t)
	has := map[string]bool{}
	failed := false
	continuedAsNew, continued := map[string]bool{}, map[string]bool{}
	for _, s := range shapes {
		has[s.workflowType] = true
		failed = failed || s.last == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED.String()
		continuedAsNew[s.workflowType] = continuedAsNew[s.workflowType] || s.last == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW.String()
		continued[s.workflowType] = continued[s.workflowType] || s.continued
	}
	for _, w := range All {
		if !has[w.Name] {
			t.Errorf("%s is registered but no history in testdata/ is of that type", w.Name)
		}
	}
	if !failed {
		t.Error("no recorded history of a failed workflow (an error path)")
	}
	for _, w := range []string{"CampaignWorkflow", "EvalSweepWorkflow", "PPOStepWorkflow", "CriticWarmupWorkflow"} {
		if !continuedAsNew[w] || !continued[w] {
			t.Errorf("no recorded %s run that continued as new (%v) or was started by it (%v)", w, continuedAsNew[w], continued[w])
		}
	}
}
