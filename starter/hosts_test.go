package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

// TestRetireHost: `hosts list` shows every host's reaper schedule and whether
// a worker polls it; `hosts retire` deletes the schedule of a host no worker
// polls, refuses (schedule kept) while one does unless --force, and says so
// when a host has no schedule.
func TestRetireHost(t *testing.T) {
	srv, c := testenv.DevServer(t)
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	ctx := context.Background()
	suffix := time.Now().Format("150405.000")
	gone, live := ids.Clean("gone-"+suffix), ids.Clean("live-"+suffix)
	for _, h := range []string{gone, live} {
		_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID: ids.ReaperScheduleID(h), Paused: true,
			Spec:   client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: time.Hour}}},
			Action: &client.ScheduleWorkflowAction{ID: ids.ReaperWorkflowID(h), Workflow: "ReaperWorkflow", TaskQueue: ids.ControlQueue},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w := worker.New(c, ids.SandboxHostQueue(live), worker.Options{})
	w.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "Noop"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var out string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, out, _, _ = starter(t, "hosts", "list")
		if strings.Contains(out, gone+"\t") && strings.Contains(out, live+"\t") && strings.Contains(out, live+"\tschedule "+ids.ReaperScheduleID(live)+"\t1 worker(s) polling") {
			break
		}
	}
	if !strings.Contains(out, gone+"\tschedule "+ids.ReaperScheduleID(gone)+"\tno worker") || !strings.Contains(out, live+"\tschedule "+ids.ReaperScheduleID(live)+"\t1 worker(s) polling") {
		t.Fatalf("hosts list:\n%s\nwant %s without a worker and %s with one", out, gone, live)
	}
	if code, _, _, err := starter(t, "hosts", "retire", live); code == 0 || err == nil || !strings.Contains(err.Error(), "still poll") || !exists(t, c, live) {
		t.Fatalf("retire a polled host: exit %d, %v, schedule kept %v; want a refusal that keeps it", code, err, exists(t, c, live))
	}
	if code, out, _, err := starter(t, "hosts", "retire", gone); code != 0 || err != nil || !strings.Contains(out, "retired") || exists(t, c, gone) {
		t.Fatalf("retire %s: exit %d, %v, %q; schedule still there: %v", gone, code, err, out, exists(t, c, gone))
	}
	if code, _, _, err := starter(t, "hosts", "retire", gone); code != 2 || err == nil || !strings.Contains(err.Error(), "no reaper schedule") {
		t.Fatalf("retire %s again: exit %d, %v; want 2 and no reaper schedule", gone, code, err)
	}
	if code, _, _, err := starter(t, "hosts", "retire", live, "--force"); code != 0 || err != nil || exists(t, c, live) {
		t.Fatalf("retire --force %s: exit %d, %v", live, code, err)
	}
}

func exists(t *testing.T, c client.Client, host string) bool {
	t.Helper()
	_, err := c.ScheduleClient().GetHandle(context.Background(), ids.ReaperScheduleID(host)).Describe(context.Background())
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestStatusNamesItsTrainer: campaign status shows the trainer a campaign is
// pinned to and that trainer's queue; a campaign not pinned shows none.
func TestStatusNamesItsTrainer(t *testing.T) {
	var out strings.Builder
	printStatus(&out, workflows.CampaignStatus{Name: "demo", Trainer: "gpu-b"}, "campaign/demo")
	if !strings.Contains(out.String(), "pinned to trainer gpu-b (queue "+ids.TrainerQueue("gpu-b")+")") {
		t.Fatalf("status:\n%s", out.String())
	}
	out.Reset()
	printStatus(&out, workflows.CampaignStatus{Name: "demo"}, "campaign/demo")
	if strings.Contains(out.String(), "pinned") {
		t.Fatalf("unpinned status:\n%s", out.String())
	}
}
