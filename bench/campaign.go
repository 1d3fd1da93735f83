package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// historySize counts a workflow run's events and their encoded bytes, and
// returns its start and close times.
func historySize(ctx context.Context, c client.Client, wid, rid string) (int, int, time.Time, time.Time, error) {
	it := c.GetWorkflowHistory(ctx, wid, rid, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n, bytes := 0, 0
	var first, last time.Time
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, 0, first, last, err
		}
		if n == 0 {
			first = ev.EventTime.AsTime()
		}
		last = ev.EventTime.AsTime()
		n++
		bytes += proto.Size(ev)
	}
	return n, bytes, first, last, nil
}

// benchCampaign: orchestration's share of a PPO step, history events and
// bytes per PPO step and per rollout as a campaign grows, and worker memory
// against concurrent rollouts: sz.steps PPO steps of sz.rollouts rollouts,
// then sz.memConc rollouts at once.
func benchCampaign(ctx context.Context, c client.Client, st store.Store, tmp string, ref task.Ref, sz sizes) (string, error) {
	l, err := gpu.StartLocal(ctx, gpu.LocalOptions{Home: tmp, Store: st})
	if err != nil {
		return "", err
	}
	defer l.Stop()
	w := worker.New(c, ids.GPUQueue, worker.Options{})
	w.RegisterActivity(l.Acts)
	if err := w.Start(); err != nil {
		return "", err
	}
	defer w.Stop()
	if _, _, err := task.ImportRefs(ctx, st, "bench-train", []task.Ref{ref}); err != nil {
		return "", err
	}
	name := fmt.Sprintf("bench%d", time.Now().UnixNano()%1e9)
	cfg, err := campaign.Parse("bench.toml", fmt.Sprintf(benchCampaignTOML, name, sz.steps, sz.rollouts, sz.rollouts))
	if err != nil {
		return "", err
	}
	var res workflows.CampaignResult
	if err := execWait(ctx, c, ids.CampaignWorkflowID(name), workflows.CampaignWorkflow, workflows.CampaignInput{Config: cfg}, &res); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nA campaign of %d PPO steps × %d policy rollouts (2 turns each, the short harness) of the reference model, then scripted rollouts for memory.\n\n", campaignSection, cfg.PPO.Steps, sz.rollouts)
	fmt.Fprintf(&b, "| PPO step | step wall | rollouts | ppo_step (trainer) | orchestration share | step history events / bytes | per-rollout events / bytes |\n|---|---|---|---|---|---|---|\n")
	for step := 1; step <= cfg.PPO.Steps; step++ {
		row, err := ppoStepRow(ctx, c, name, step)
		if err != nil {
			return "", err
		}
		b.WriteString(row)
	}
	cn, cb, _, _, _ := historySize(ctx, c, ids.CampaignWorkflowID(name), "")
	fmt.Fprintf(&b, "\nThe campaign workflow's own history: %d events, %d bytes for %d steps (it continues as new every `continue_as_new_every` steps).\n", cn, cb, cfg.PPO.Steps)

	// Worker memory (this process runs every worker) against concurrent rollouts.
	fmt.Fprintf(&b, "\n| concurrent rollouts (scripted, `sleep 3`; one task × that many attempts) | most seen running at once | worker heap in use | goroutines |\n|---|---|---|---|\n")
	for _, conc := range sz.memConc {
		m, err := peakMemory(ctx, c, ref, fmt.Sprintf("%s-mem-%d", name, conc), conc)
		if err != nil {
			return "", fmt.Errorf("memory at %d concurrent rollouts: %w", conc, err)
		}
		fmt.Fprintf(&b, "| %d | %d | %.1f MiB | %d |\n", conc, m.running, float64(m.heap)/(1<<20), m.goroutines)
	}
	return b.String(), nil
}

// campaignSection is the heading of the campaign figures.
const campaignSection = "## Campaigns"

// benchCampaignTOML is a small campaign of the reference model (%q: its
// name; then its steps, tasks per step and concurrency).
const benchCampaignTOML = `name = %q
[pools]
train = "bench-train"
[policy]
max_new_tokens = 16
preset = "small"
harness = "short"
[critic_warmup]
fit_epochs = 2
ev_gate = -1000.0
require_gate = false
[ppo]
steps = %d
tasks_per_step = %d
concurrency = %d
turn_cap = 2
max_failed_share = 0.5
[eval]
base = false
at_end = false
`

// ppoStepRow is one PPO step's table row: its wall time split into the
// rollout and training phases (from the step's own history), the rest being
// orchestration, and history sizes for the step and per rollout.
func ppoStepRow(ctx context.Context, c client.Client, name string, step int) (string, error) {
	wid := ids.PPOStepWorkflowID(name, step)
	n, bytes, start, end, err := historySize(ctx, c, wid, "")
	if err != nil {
		return "", err
	}
	it := c.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var rFirst, rLast, tStart, tEnd time.Time
	var rolloutIDs []string
	for it.HasNext() {
		ev, _ := it.Next()
		if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			if rFirst.IsZero() {
				rFirst = ev.EventTime.AsTime()
			}
			rolloutIDs = append(rolloutIDs, a.WorkflowId)
		}
		if ev.GetChildWorkflowExecutionCompletedEventAttributes() != nil {
			rLast = ev.EventTime.AsTime()
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.Name == "TrainerPPOStep" {
			tStart = ev.EventTime.AsTime()
		}
		if ev.GetActivityTaskCompletedEventAttributes() != nil && !tStart.IsZero() {
			tEnd = ev.EventTime.AsTime()
		}
	}
	re, rb := 0, 0
	for _, id := range rolloutIDs {
		n, b, _, _, err := historySize(ctx, c, id, "")
		if err != nil {
			return "", err
		}
		re, rb = re+n, rb+b
	}
	wall, roll, train := end.Sub(start), rLast.Sub(rFirst), tEnd.Sub(tStart)
	orch := wall - roll - train
	return fmt.Sprintf("| %d | %s | %s | %s | %.1f%% | %d / %d B | %d / %d B |\n", step, wall.Round(time.Millisecond), roll.Round(time.Millisecond),
		train.Round(time.Millisecond), 100*float64(orch)/float64(wall), n, bytes, re/max(1, len(rolloutIDs)), rb/max(1, len(rolloutIDs))), nil
}

// memPeaks is what peakMemory saw: the most rollouts running at once (the
// sweep's progress), this process's heap in use and its goroutines.
type memPeaks struct {
	running    int
	heap       uint64
	goroutines int
}

// peakMemory runs conc scripted rollouts at once (one task, conc attempts:
// a sweep refuses a task listed twice) and samples this process's heap in
// use, goroutines and the sweep's running rollouts until they finish; it
// returns the peaks, and an error when the sweep did not run conc rollouts.
func peakMemory(ctx context.Context, c client.Client, ref task.Ref, sweepID string, conc int) (memPeaks, error) {
	in := workflows.EvalSweepInput{SweepID: sweepID, Tasks: []task.Ref{ref}, Attempts: conc, Concurrency: conc,
		Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 3"}}}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids.EvalSweepWorkflowID(in.SweepID), TaskQueue: ids.ControlQueue}, workflows.EvalSweepWorkflow, in)
	if err != nil {
		return memPeaks{}, err
	}
	var p memPeaks
	var res workflows.EvalSweepResult
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, &res) }()
	for {
		select {
		case err := <-done:
			if err == nil && res.Summary.Rollouts != conc {
				err = fmt.Errorf("sweep %s reported %d rollouts, want %d", sweepID, res.Summary.Rollouts, conc)
			}
			return p, err
		case <-time.After(200 * time.Millisecond):
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			p.heap = max(p.heap, m.HeapInuse)
			p.goroutines = max(p.goroutines, runtime.NumGoroutine())
			var pr workflows.Progress
			if v, err := c.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress); err == nil && v.Get(&pr) == nil {
				p.running = max(p.running, pr.Running)
			}
		}
	}
}
