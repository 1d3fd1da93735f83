package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

// benchRST: tasks synthesized and audited per hour on this machine, and the
// share of rollout time spent in sandbox activities against orchestration:
// nSeeds of examples/seeds (0: all), rounds RST rounds.
func benchRST(ctx context.Context, c client.Client, st store.Store, nSeeds, rounds int) (string, error) {
	var seeds []task.Ref
	ts, err := task.LoadAll(filepath.Join(testenv.RepoRoot(), "examples/seeds"))
	if err != nil {
		return "", err
	}
	if nSeeds > 0 && nSeeds < len(ts) {
		ts = ts[:nSeeds]
	}
	for _, t := range ts {
		r, err := task.Bundle(ctx, st, t)
		if err != nil {
			return "", err
		}
		seeds = append(seeds, r)
	}
	run := fmt.Sprintf("bench-rst-%d", time.Now().UnixNano())
	t0 := time.Now()
	var syn workflows.SynthSweepResult
	if err := execWait(ctx, c, "synthsweep/"+run, workflows.SynthSweepWorkflow, workflows.SynthSweepInput{
		RunID: run, Seeds: seeds, PerSeed: 1, Rounds: rounds, RNGSeed: 3, Concurrency: 3, Pool: "bench-" + run,
	}, &syn); err != nil {
		return "", err
	}
	synthWall := time.Since(t0)
	t1 := time.Now()
	var aud workflows.AuditSweepResult
	ain := workflows.AuditSweepInput{RunID: run + "-audit", Tasks: syn.Tasks, Concurrency: 3}
	if syn.TaskManifest != nil { // every accepted task, listed inline or not
		ain.Tasks, ain.TaskManifest = nil, syn.TaskManifest
	}
	if err := execWait(ctx, c, "auditsweep/"+run, workflows.AuditSweepWorkflow, ain, &aud); err != nil {
		return "", err
	}
	auditWall := time.Since(t1)
	sandbox, total, n, err := sandboxShare(ctx, c, run)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Task synthesis and audit\n\n")
	fmt.Fprintf(&b, "%d seeds × %d RST rounds (procedural), then the eight-dimension audit of the %d synthesized tasks; 3 chains and 3 audits at once.\n\n", len(seeds), rounds, syn.Summary.Synthesized)
	fmt.Fprintf(&b, "| what | figure |\n|---|---|\n")
	fmt.Fprintf(&b, "| synthesis: %d tasks accepted of %d candidates in %s | **%.0f tasks/hour** |\n", syn.Summary.Synthesized, syn.Summary.Variations, synthWall.Round(time.Second), float64(syn.Summary.Synthesized)/synthWall.Hours())
	fmt.Fprintf(&b, "| audit: %d tasks (%d kept) in %s | **%.0f tasks/hour** |\n", aud.Summary.Audited, aud.Summary.Kept, auditWall.Round(time.Second), float64(aud.Summary.Audited)/auditWall.Hours())
	fmt.Fprintf(&b, "| share of rollout time in sandbox activities (create, turns, verify, destroy) over %d rollouts | %.0f%% (orchestration %.0f%%) |\n", n, 100*sandbox/total, 100*(1-sandbox/total))
	return b.String(), nil
}

func execWait(ctx context.Context, c client.Client, id string, wf any, in any, out any) error {
	r, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: ids.ControlQueue}, wf, in)
	if err != nil {
		return err
	}
	return r.Get(ctx, out)
}

// sandboxShare sums, over the run's rollouts, the time inside sandbox
// activities and the rollouts' whole time.
func sandboxShare(ctx context.Context, c client.Client, run string) (float64, float64, int, error) {
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf(`WorkflowType = "RolloutWorkflow" AND CampaignID STARTS_WITH "%s"`, ids.Clean(run)), PageSize: 1000,
	})
	if err != nil {
		return 0, 0, 0, err
	}
	sandboxActs := map[string]bool{"CreateSandbox": true, "AgentTurn": true, "Verify": true, "DestroySandbox": true}
	var inSandbox, total float64
	for _, e := range resp.Executions {
		total += e.CloseTime.AsTime().Sub(e.StartTime.AsTime()).Seconds()
		it := c.GetWorkflowHistory(ctx, e.Execution.WorkflowId, e.Execution.RunId, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		kind := map[int64]string{}
		started := map[int64]time.Time{}
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return 0, 0, 0, err
			}
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				kind[ev.EventId] = a.ActivityType.Name
			}
			if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
				started[a.ScheduledEventId] = ev.EventTime.AsTime()
			}
			if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && sandboxActs[kind[a.ScheduledEventId]] {
				inSandbox += ev.EventTime.AsTime().Sub(started[a.ScheduledEventId]).Seconds()
			}
		}
	}
	if total == 0 {
		return 0, 0, 0, fmt.Errorf("no rollouts found for %s", run)
	}
	return inSandbox, total, len(resp.Executions), nil
}
