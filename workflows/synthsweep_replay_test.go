package workflows

import (
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// The replay test (TestReplayRecordedHistories) replays every history in
// testdata/; this checks that the synthesis sweep's are there, of both
// paths: the one-run sweep recorded before synth-sweep-windowed, and both
// runs of a windowed sweep that continued as new
// (TestSynthesizedTasksAreValidAndReproducible with T1FLOW_RECORD_HISTORY=1).
func TestSynthSweepHistoriesOfBothPathsAreRecorded(t *testing.T) {
	completed, continued := enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
	for file, want := range map[string]struct {
		windowed, startedByContinue bool
		last                        enumspb.EventType
		children                    int
	}{
		"testdata/synthsweep.json":                         {false, false, completed, 1},
		"testdata/synthsweep_windowed.json":                {true, false, continued, 1},
		"testdata/synthsweep_windowed_after_continue.json": {true, true, completed, 1},
	} {
		h, err := client.HistoryFromJSON(mustOpen(t, file), client.HistoryJSONOptions{})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		ev := h.GetEvents()
		start := ev[0].GetWorkflowExecutionStartedEventAttributes()
		windowed, children := false, 0
		for _, e := range ev {
			if m := e.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "Version" {
				var id string
				if err := converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["change-id"], &id); err == nil && id == "synth-sweep-windowed" {
					windowed = true
				}
			}
			if e.GetStartChildWorkflowExecutionInitiatedEventAttributes() != nil {
				children++
			}
		}
		switch {
		case start.GetWorkflowType().GetName() != "SynthSweepWorkflow":
			t.Errorf("%s: a %s history", file, start.GetWorkflowType().GetName())
		case windowed != want.windowed:
			t.Errorf("%s: synth-sweep-windowed marker %v, want %v", file, windowed, want.windowed)
		case (start.GetContinuedExecutionRunId() != "") != want.startedByContinue || ev[len(ev)-1].GetEventType() != want.last:
			t.Errorf("%s: started by continue-as-new %v, ends %s; want %v, %s", file, start.GetContinuedExecutionRunId() != "",
				ev[len(ev)-1].GetEventType(), want.startedByContinue, want.last)
		case children != want.children:
			t.Errorf("%s: %d chains started, want %d", file, children, want.children)
		}
	}
}
