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
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
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

// TestRetireIdleHostActivity: against the dev server, RetireIdleHost keeps
// the schedule of a host that a worker polls, or that completed a reap within
// the wait, or whose schedule is younger than the wait, and deletes it
// otherwise.
func TestRetireIdleHostActivity(t *testing.T) {
	_, c := testenv.DevServer(t)
	ctx := context.Background()
	a := &activities.Activities{Temporal: c}
	suffix := ids.Clean(time.Now().Format("150405.000"))
	mk := func(h string) {
		t.Helper()
		_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
			ID: ids.ReaperScheduleID(h), Paused: true,
			Spec:   client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: time.Hour}}},
			Action: &client.ScheduleWorkflowAction{ID: ids.ReaperWorkflowID(h), Workflow: "ReaperWorkflow", TaskQueue: ids.ControlQueue},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	retire := func(h string, after float64) activities.RetireResult {
		t.Helper()
		r, err := a.RetireIdleHost(ctx, activities.RetireInput{Host: h, AfterSec: after})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	gone, polled, reaped := "gone-"+suffix, "polled-"+suffix, "reaped-"+suffix
	for _, h := range []string{gone, polled, reaped} {
		mk(h)
	}
	if r := retire(gone, 3600); r.Retired || !exists(t, c, gone) {
		t.Fatalf("a schedule younger than the wait: %+v", r)
	}
	// A completed reaper run of one host (a stand-in workflow of that type).
	q := "reaper-standin-" + suffix
	w := worker.New(c, q, worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "ReaperWorkflow"})
	p := worker.New(c, ids.SandboxHostQueue(polled), worker.Options{})
	p.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: "Noop"})
	if err := roles.Start([]worker.Worker{w, p}); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	defer p.Stop()
	time.Sleep(2100 * time.Millisecond) // every schedule is now older than 2 s
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids.ReaperWorkflowID(reaped) + "-manual-1", TaskQueue: q}, "ReaperWorkflow")
	if err != nil || run.Get(ctx, nil) != nil {
		t.Fatal(err)
	}
	var rr activities.RetireResult
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if rr = retire(reaped, 2); strings.Contains(rr.Reason, "reaper run completed") {
			break
		}
	}
	if rr.Retired || !exists(t, c, reaped) || !strings.Contains(rr.Reason, "reaper run completed") {
		t.Fatalf("a host reaped within the wait: %+v", rr)
	}
	var r activities.RetireResult
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if r = retire(polled, 1); strings.Contains(r.Reason, "polls") {
			break
		}
	}
	if r.Retired || !exists(t, c, polled) {
		t.Fatalf("a polled host: %+v", r)
	}
	if r := retire(gone, 1); !r.Retired || exists(t, c, gone) {
		t.Fatalf("a gone host: %+v, schedule kept %v", r, exists(t, c, gone))
	}
	if r := retire(gone, 1); r.Retired || r.Reason != "no reaper schedule" {
		t.Fatalf("again: %+v", r)
	}
}
