package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/sweepstore"
)

// checkResume: --resume takes the sweep and filters; task and agent flags
// belong to a new sweep.
func (f *evalFlags) checkResume(explicit map[string]bool) error {
	if f.resume == "" {
		if len(f.filterTypes) > 0 {
			return badInput(errors.New("eval: --filter-error-type (-f) filters what --resume SWEEP reruns: give --resume"))
		}
		return nil
	}
	for _, name := range []string{"tasks", "pool", "agent", "command", "attempts", "checkpoint", "id", "new"} {
		if explicit[name] {
			return badInput(fmt.Errorf("eval: --resume %s reruns the sweep with its own settings: drop --%s", f.resume, name))
		}
	}
	if err := workflows.CheckErrorTypes(f.filterTypes); err != nil {
		return badInput(fmt.Errorf("eval: --filter-error-type: %w", err))
	}
	return nil
}

// evalResume starts (or finds) the next resume round of a finished sweep:
// it reruns the unfinished rollouts and those whose error type is in
// --filter-error-type (default workflows.DefaultResumeErrorTypes).
func evalResume(ctx context.Context, f *evalFlags, explicit map[string]bool, stdout, stderr io.Writer) error {
	sweep := strings.TrimPrefix(f.resume, "eval/")
	st, err := openStore(f.storeDir)
	if err != nil {
		return err
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	in, err := sweepInput(ctx, c, sweep)
	if err != nil {
		return err
	}
	sweep = in.SweepID
	if in.TaskManifest == nil { // a sweep that never continued as new holds its tasks inline
		ref, err := store.PutJSON(ctx, st, "evals/"+ids.Clean(sweep)+"/tasks.json", task.Pool{Name: sweep, Tasks: in.Tasks})
		if err != nil {
			return err
		}
		in.TaskManifest, in.Tasks = &ref, nil
	}
	_, _, round, err := sweepstore.LatestReport(ctx, st, sweep)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	rin := workflows.EvalResumeInput{SweepID: sweep, Round: round + 1, Sweep: in, ErrorTypes: f.filterTypes}
	if explicit["concurrency"] {
		rin.Concurrency = f.concurrency
	}
	wid := ids.EvalResumeWorkflowID(sweep, rin.Round)
	run, existing, err := startOrFind(ctx, c, wid, client.StartWorkflowOptions{
		ID: wid, TaskQueue: ids.ControlQueue, StaticSummary: fmt.Sprintf("resume %d of eval %s", rin.Round, sweep),
	}, workflows.EvalResumeWorkflow, rin)
	if err != nil {
		return fmt.Errorf("start resume of %s: %w", sweep, err)
	}
	types := f.filterTypes
	if len(types) == 0 {
		types = append(slices.Clone(workflows.DefaultResumeErrorTypes), workflows.DefaultResumeNote)
	}
	announce(infoOut(f.asJSON, stdout, stderr), wid, existing, fmt.Sprintf("found resume %d of sweep %s", rin.Round, sweep),
		fmt.Sprintf("resume %d of sweep %s: rerunning unfinished rollouts and those with %s", rin.Round, sweep, strings.Join(types, ", ")))
	if in.Agent.Kind == activities.AgentPolicy && !existing {
		fmt.Fprintln(stderr, "note: a policy sweep's reruns sample from the weights its inference servers hold now; the report's policy_versions shows which")
	}
	if !f.wait && !f.asJSON {
		return nil
	}
	var res workflows.EvalSweepResult
	if err := waitWithProgress(ctx, c, run, stderr, "rollouts rerun", &res); err != nil {
		return err
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return fmt.Errorf("read resumed report: %w", err)
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(evalJSON(rep, res.Report))
	}
	printTable(stdout, rep)
	fmt.Fprintf(stdout, "report: %s\n", res.Report.URI)
	return nil
}

// sweepInput is the input of the sweep's latest run (after continue-as-new
// it carries the task manifest). An unknown or running sweep is bad input.
func sweepInput(ctx context.Context, c client.Client, sweep string) (workflows.EvalSweepInput, error) {
	var in workflows.EvalSweepInput
	wid := ids.EvalSweepWorkflowID(sweep)
	d, err := c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return in, badInput(fmt.Errorf("eval: --resume %s: no eval sweep with that ID (workflow %s; the ID is the one `starter eval` printed)", sweep, wid))
	case err != nil:
		return in, err
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return in, badInput(fmt.Errorf("eval: --resume %s: the sweep is still running; wait for it (or cancel it) first", sweep))
	}
	it := c.GetWorkflowHistory(ctx, wid, info.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ev, err := it.Next()
	if err != nil {
		return in, fmt.Errorf("sweep %s: its history: %w", sweep, err)
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		return in, fmt.Errorf("sweep %s: its input: %w", sweep, err)
	}
	if in.SweepID == "" {
		in.SweepID = sweep
	}
	in.Window = nil
	if in.Attempts <= 0 {
		in.Attempts = 1
	}
	return in, nil
}
