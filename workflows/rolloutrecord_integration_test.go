package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

// maxLongRolloutHistory is the budget of a 300-turn rollout's history
// (docs/sweeps.md has the measured figure).
const maxLongRolloutHistory = 512 << 10

// TestLongRolloutHistoryStaysSmall: a 300-turn rollout (the sleep sandbox
// backend, each turn a full 512-byte preview) keeps its history within
// 512 KiB: each turn comes back slim with a claim check, and the record is
// assembled from the stored turns, so readers of record.json still get 300
// whole turns.
func TestLongRolloutHistoryStaysSmall(t *testing.T) {
	_, c := testenv.DevServer(t)
	st, err := store.NewLocal(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	host := testenv.HostName(ids.Clean(t.Name()))
	testenv.Worker(t, c, roles.Control+","+roles.Sandbox, &activities.Activities{Store: st, Temporal: c, Host: host,
		Sleep: time.Millisecond, SleepTurns: 300})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bundle := store.Ref{URI: "file:///nowhere/sleep-backend.tar", SHA256: "00", Bytes: 1}
	in := workflows.RolloutInput{CampaignID: "long-" + ids.Clean(time.Now().Format("150405.000")), Stage: "eval", Attempt: 1, TurnCap: 300,
		Task: task.Ref{ID: "0000000000001009", Name: "long-rollout", Bundle: bundle}, Agent: activities.AgentSpec{Kind: activities.AgentNop}}
	if os.Getenv("T1FLOW_RECORD_HISTORY") == "1" {
		// For the replay test: a 3-turn rollout whose turns are stored.
		short := in
		short.TurnCap, short.Attempt = 3, 2
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: ids.ControlQueue}, workflows.RolloutWorkflow, short)
		if err == nil {
			err = run.Get(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		recordHistory(t, c, run.GetID(), "testdata/rollout_turns_stored.json")
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: ids.ControlQueue}, workflows.RolloutWorkflow, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.RolloutResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Turns != 300 || res.Record == nil {
		t.Fatalf("rollout: %d turns, record %v; want 300 and a record", res.Turns, res.Record)
	}
	events, bytes, byType := 0, 0, map[string]int{}
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events, bytes = events+1, bytes+proto.Size(ev)
		byType[ev.GetEventType().String()] += proto.Size(ev)
	}
	t.Logf("bytes by event type: %v", byType)
	t.Logf("300-turn rollout: %d history events, %d bytes (%.0f KiB); record %d bytes", events, bytes, float64(bytes)/1024, res.Record.Bytes)
	if bytes > maxLongRolloutHistory {
		t.Errorf("a 300-turn rollout's history is %d bytes, over %d", bytes, maxLongRolloutHistory)
	}
	var rec workflows.RolloutRecord
	if err := store.GetJSON(ctx, st, *res.Record, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Turns) != 300 {
		t.Fatalf("record has %d turns, want 300", len(rec.Turns))
	}
	for _, tr := range rec.Turns {
		if len(tr.Preview) != activities.PreviewBytes || !strings.HasPrefix(tr.Command, "synthetic turn") {
			t.Fatalf("record turn %d is not whole: %d-byte preview, command %q", tr.Turn, len(tr.Preview), tr.Command)
		}
	}
}
