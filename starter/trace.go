package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// trace prints what happened in one rollout, or in every rollout of a task.
func trace(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	storeDir := fs.String("store", config.StoreDir(), "artifact store")
	limit := fs.Int("limit", 10, "at most this many rollouts of a task, newest first")
	id, err := parseOne(fs, args, "usage: starter trace ROLLOUT_ID|TASK_ID")
	if err != nil {
		return err
	}
	if strings.ContainsAny(id, `"'\`) {
		return badInput(fmt.Errorf("trace: %q is not a rollout or task ID", id))
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	q := fmt.Sprintf(`WorkflowType = "RolloutWorkflow" AND (RolloutID = "%s" OR TaskID = "%s")`, id, id)
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: int32(*limit)})
	if err != nil {
		return err
	}
	if len(resp.Executions) == 0 {
		return badInput(fmt.Errorf("no rollout has RolloutID or TaskID %q", id))
	}
	for i, e := range resp.Executions {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		wid := e.Execution.WorkflowId
		fmt.Fprintf(stdout, "rollout %s  [%s]\n  %s\n", wid, strings.ToLower(strings.TrimPrefix(e.Status.String(), "WORKFLOW_EXECUTION_STATUS_")), config.UIURL(wid))
		if e.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus)
			var s workflows.RolloutStatus
			if err == nil && v.Get(&s) == nil {
				fmt.Fprintf(stdout, "  running: %s, sandbox %d (%s on %s), turn %d\n", s.Phase, s.SandboxAttempt, s.Container, s.Host, s.Turn)
			}
			continue
		}
		var res workflows.RolloutResult
		if err := c.GetWorkflow(ctx, wid, e.Execution.RunId).Get(ctx, &res); err != nil {
			fmt.Fprintf(stdout, "  failed: %v\n", err)
			continue
		}
		printRollout(ctx, stdout, st, res)
	}
	return nil
}

func printRollout(ctx context.Context, w io.Writer, st store.Store, res workflows.RolloutResult) {
	fmt.Fprintf(w, "  task %s (%s), attempt %d: %s", res.Name, res.TaskID, res.Attempt, res.Outcome)
	if res.Scored {
		fmt.Fprintf(w, ", %d/%d assertions, reward %.3f", res.Passed, res.Total, res.Reward)
	}
	fmt.Fprintf(w, ", %d turns (%s), %.1fs, %d sandbox(es)\n", res.Turns, res.AgentEnd, res.DurationSec, res.SandboxAttempts)
	if res.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", res.Error)
	}
	if res.Record == nil {
		return
	}
	var rec workflows.RolloutRecord
	if err := store.GetJSON(ctx, st, *res.Record, &rec); err != nil {
		fmt.Fprintf(w, "  record unavailable: %v\n", err)
		return
	}
	for _, f := range rec.Failures {
		fmt.Fprintf(w, "  retry: %s\n", f)
	}
	for _, t := range rec.Turns {
		line := fmt.Sprintf("  turn %d: `%s` exit %d, %d ms", t.Turn, t.Command, t.ExitCode, t.DurationMs)
		if t.ParseError != "" {
			line += " — invalid action: " + t.ParseError
		}
		if t.TimedOut {
			line += " (timed out)"
		}
		fmt.Fprintln(w, line)
		if p := strings.TrimSpace(t.Preview); p != "" {
			fmt.Fprintf(w, "    | %s\n", strings.ReplaceAll(p, "\n", "\n    | "))
		}
		if t.Output != nil {
			fmt.Fprintf(w, "    (full output: %s)\n", t.Output.URI)
		}
	}
	if v := rec.Verify; v != nil {
		fmt.Fprintf(w, "  assertions (%s):\n", v.Format)
		for _, a := range v.Assertions {
			fmt.Fprintf(w, "    %-7s %s", a.Status, a.Name)
			if a.Message != "" {
				msg, _, _ := strings.Cut(a.Message, "\n")
				fmt.Fprintf(w, " — %s", msg)
			}
			fmt.Fprintln(w)
		}
	}
	if e := rec.Episode; e != nil {
		fmt.Fprintf(w, "  episode: %d tokens, %d loss tokens, stitches %v, %d invalid actions, policy %v\n", e.Tokens, e.LossTokens, e.StitchCases, e.ParseErrors, e.PolicyVersions)
		fmt.Fprintf(w, "  drift: %d prompt mismatches, %d loss mismatches (drift %.4f), re-encoded context %.4f\n", e.Drift.PromptMismatches, e.Drift.LossMismatches, e.Drift.Drift, e.Drift.ReencodedContextShare)
		fmt.Fprintf(w, "  routing: %d/%d positions × %d layers × top-%d, valid %v\n", e.Routing.Covered, e.Routing.Positions, e.Routing.Layers, e.Routing.TopK, e.Routing.Valid)
		if e.Trajectory != nil {
			fmt.Fprintf(w, "  trajectory: %s (%d bytes)\n", e.Trajectory.URI, e.Trajectory.Bytes)
		}
	}
}
