package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/campaignctl"
)

const campaignUsage = `usage: starter campaign start -f FILE [--wait]
       starter campaign status|pause|resume|retry|skip|cancel NAME
       starter campaign set-concurrency NAME N
       starter campaign list`

// campaignCmd drives campaigns: start from a config, then watch and steer.
func campaignCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return badInput(errors.New(campaignUsage))
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("campaign "+sub, flag.ContinueOnError)
	file := fs.String("f", "", "campaign config (TOML)")
	wait := fs.Bool("wait", false, "wait for the campaign and print its evals; a campaign that pauses on a failed stage ends the wait with the failure (it stays paused for retry, skip or cancel)")
	storeDir := fs.String("store", config.StoreDir(), "artifact store (where policy.init's checkpoint is found or imported)")
	pos, err := parse(fs, rest)
	if err != nil {
		return err
	}
	if sub == "start" && *file == "" {
		return badInput(errors.New(campaignUsage))
	}
	var cfg campaign.Config
	if sub == "start" {
		if cfg, err = campaign.Load(*file); err != nil {
			return badInput(fmt.Errorf("invalid campaign, nothing was started:\n  %s", campaign.Describe(err)))
		}
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	switch sub {
	case "start":
		in := workflows.CampaignInput{Config: cfg}
		if cfg.Policy.Init != "random" {
			st, err := openStore(*storeDir)
			if err != nil {
				return err
			}
			ck, err := resolveCheckpoint(ctx, c, st, cfg.Policy.Init)
			if err != nil {
				return fmt.Errorf("policy.init: %w", err)
			}
			in.Init = &ck
		}
		return campaignStart(ctx, c, in, *wait, stdout, stderr)
	case "list":
		return campaignList(ctx, c, stdout)
	case "status", "pause", "resume", "retry", "skip", "set-concurrency", "cancel":
		if len(pos) < 1 {
			return badInput(errors.New(campaignUsage))
		}
		return campaignSteer(ctx, c, sub, pos, stdout)
	}
	return badInput(fmt.Errorf("campaign %s: unknown subcommand\n%s", sub, campaignUsage))
}

func campaignStart(ctx context.Context, c client.Client, in workflows.CampaignInput, wait bool, stdout, stderr io.Writer) error {
	cfg := in.Config
	wid := ids.CampaignWorkflowID(cfg.Name)
	warnNoWorker(ctx, c, ids.GPUQueue, "gpu", stderr)
	run, err := startRun(ctx, c, launch{wid, fmt.Sprintf("campaign %s: %d PPO steps × %d tasks", cfg.Name, cfg.PPO.Steps, cfg.PPO.TasksPerStep),
		workflows.CampaignWorkflow, in}, stdout)
	if err != nil || !wait {
		return err
	}
	var res workflows.CampaignResult
	status := func(ctx context.Context) (workflows.CampaignStatus, error) { return campaignStatus(ctx, c, wid) }
	if err := awaitCampaign(ctx, run, status, &res); err != nil {
		return fmt.Errorf("campaign %s: %w", cfg.Name, err)
	}
	printEvals(stdout, res.State)
	fmt.Fprintf(stdout, "report: %s\n", res.Report.URI)
	return nil
}

// campaignSteer is the subcommands that name a campaign: pos[0].
func campaignSteer(ctx context.Context, c client.Client, sub string, pos []string, stdout io.Writer) error {
	wid := ids.CampaignWorkflowID(pos[0])
	switch sub {
	case "status":
		s, err := campaignStatus(ctx, c, wid)
		if err != nil {
			return fmt.Errorf("campaign %s: %w", pos[0], err)
		}
		printStatus(stdout, s, wid)
		return nil
	case "set-concurrency":
		var n int
		if len(pos) != 2 || func() error { _, e := fmt.Sscan(pos[1], &n); return e }() != nil {
			return badInput(errors.New(campaignUsage))
		}
		return updateCampaign(ctx, c, wid, workflows.UpdateSetConcurrency, stdout, n)
	case "resume":
		run, in, err := campaignctl.ResumeClosed(ctx, c, pos[0])
		if err != nil || run == nil {
			if err == nil { // still running: the resume update
				err = updateCampaign(ctx, c, wid, sub, stdout)
			}
			return err
		}
		st := in.State
		ck := "none yet: it loads its init first"
		if st.Checkpoint != nil {
			ck = st.Checkpoint.Name + " (" + st.Checkpoint.WeightVersion + ")"
		}
		fmt.Fprintf(stdout, "campaign %s resumed (run %s): %s, step %d/%d, epoch %s, from checkpoint %s\n  %s\n",
			pos[0], run.GetRunID(), st.Phase, st.Step, in.Config.PPO.Steps, st.Epoch, ck, config.UIURL(wid))
		return nil
	case "cancel":
		if err := c.CancelWorkflow(ctx, wid, ""); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cancel requested for %s: running rollouts release their sandboxes first\n", wid)
		return nil
	}
	return updateCampaign(ctx, c, wid, sub, stdout) // pause, resume, retry, skip
}

func campaignList(ctx context.Context, c client.Client, stdout io.Writer) error {
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: `WorkflowType = "CampaignWorkflow"`, PageSize: 100})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CAMPAIGN\tSTATUS\tSTARTED\tUI")
	seen := map[string]bool{}
	for _, e := range resp.Executions {
		if seen[e.Execution.WorkflowId] {
			continue // earlier runs of a continued-as-new campaign
		}
		seen[e.Execution.WorkflowId] = true
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.TrimPrefix(e.Execution.WorkflowId, "campaign/"), strings.ToLower(e.Status.String()),
			e.StartTime.AsTime().Format("2006-01-02 15:04"), config.UIURL(e.Execution.WorkflowId))
	}
	return tw.Flush()
}

func updateCampaign(ctx context.Context, c client.Client, wid, update string, stdout io.Writer, args ...any) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: update, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return fmt.Errorf("%s %s: %w", update, wid, err)
	}
	var s workflows.CampaignStatus
	if err := h.Get(ctx, &s); err != nil {
		return fmt.Errorf("%s %s: %w", update, wid, err)
	}
	printStatus(stdout, s, wid)
	return nil
}

// campaignStatus is the campaign workflow's status query.
func campaignStatus(ctx context.Context, c client.Client, wid string) (workflows.CampaignStatus, error) {
	var s workflows.CampaignStatus
	v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus)
	if err == nil {
		err = v.Get(&s)
	}
	return s, err
}

func printStatus(w io.Writer, s workflows.CampaignStatus, wid string) {
	state := s.Phase
	if f := s.Failure; f != nil {
		state += fmt.Sprintf(" (paused: stage %s failed, %s)\n  %s\n  decide: starter campaign retry|skip|cancel %s", f.Stage, f.Type, f.Reason, s.Name)
	} else if s.Paused {
		state += " (paused: the current step finishes, then it waits)"
	}
	fmt.Fprintf(w, "campaign %s: %s\n  step %d/%d, policy %s, concurrency %d\n", s.Name, state, s.Step, s.Steps, s.WeightVersion, s.Concurrency)
	if s.Trainer != "" {
		fmt.Fprintf(w, "  pinned to trainer %s (queue %s)\n", s.Trainer, ids.TrainerQueue(s.Trainer))
	}
	for _, r := range s.Resumes {
		how := "trainer kept its state"
		if !r.Kept {
			how = "trainer reloaded, keys under " + r.KeyTag
		}
		fmt.Fprintf(w, "  resumed (run %d) at %s step %d from %s (%s; trainer %s, %s)\n", r.Run, r.Phase, r.Step, r.Checkpoint, r.WeightVersion, r.TrainerVersion, how)
	}
	if len(s.Retries) > 0 || len(s.Skipped) > 0 {
		fmt.Fprintf(w, "  retried stages %v, skipped %v\n", s.Retries, s.Skipped)
	}
	if s.InFlight != "" {
		fmt.Fprintf(w, "  in flight: %s\n", s.InFlight)
	}
	fmt.Fprintf(w, "  aborted %d, failed %d, stale %d rollouts left out of training\n", s.Aborted, s.Failed, s.Stale)
	if s.Refused > 0 {
		fmt.Fprintf(w, "  %d rollouts that would have trained were in batches a step refused (partial batch, reward collapse)\n", s.Refused)
	}
	if s.Carried+s.CarriedDropped > 0 {
		fmt.Fprintf(w, "  oversampling: %d rollouts carried to the next step, %d carried rollouts cancelled with a failed step\n", s.Carried, s.CarriedDropped)
	}
	tampered, verifierErrors := 0, 0
	for _, r := range s.Recent {
		tampered, verifierErrors = tampered+r.Tampered, verifierErrors+r.VerifierErrors
	}
	if tampered > 0 {
		fmt.Fprintf(w, "  tampered %d in the recent steps (trained on at reward 0)\n", tampered)
	}
	if verifierErrors > 0 {
		fmt.Fprintf(w, "  verifier_error %d in the recent steps (test.sh hung, crashed or wrote nothing in the agent's sandbox: trained on at reward 0)\n", verifierErrors)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "  latest checkpoint %s (compare: starter eval --pool POOL --checkpoint %s:init,%s:latest --wait)\n", s.Checkpoint, s.Name, s.Name)
	}
	if s.ColdEV != nil || s.WarmEV != nil {
		fmt.Fprintf(w, "  critic explained variance: cold %s, warm %s%s\n", fmtEV(s.ColdEV), fmtEV(s.WarmEV), ceilingOf(s.WarmCeiling, math.Inf(-1))) // status knows no bar
	}
	for _, r := range s.Recent {
		b, _ := json.Marshal(r.Metrics)
		fmt.Fprintf(w, "  step %d (%s): %d/%d trained, reward %.3f, turns %.1f%s, %s\n", r.Step, r.PolicyVersion, r.Trained, r.Rollouts, r.RewardMean, r.MeanTurns, retriesText(r)+stalenessText(r)+workflows.OversampleText(r), b)
	}
	for _, e := range s.Evals {
		fmt.Fprintf(w, "  eval %s\n", e)
	}
	fmt.Fprintf(w, "  %s\n", config.UIURL(wid))
}

// retriesText says how many of a step's samples were started again after an
// R3 abort, and how often ("" when none was).
func retriesText(r workflows.StepRecord) string {
	retried := retriedSamples(r)
	if retried == 0 {
		return ""
	}
	return fmt.Sprintf(", %d retried after aborts (samples by retries %v, max %d)", retried, r.Retries, r.RetriesMax)
}

// stalenessText says, under ppo.max_staleness, how far behind the step's
// policy its trained rollouts were sampled and how many were left out.
func stalenessText(r workflows.StepRecord) string {
	if r.MaxStaleness == 0 {
		return ""
	}
	s := fmt.Sprintf(", trained by versions behind %v, %d stale left out (max_staleness %d)", r.Staleness, r.Stale, r.MaxStaleness)
	if r.Ahead {
		s += fmt.Sprintf("; started ahead: collected in %.0f s while step %d trained, then waited %.0f s", r.CollectSeconds, r.Step-1, r.WaitSeconds)
	}
	return s
}

func retriedSamples(r workflows.StepRecord) int {
	n := 0
	for k, c := range r.Retries {
		if k > 0 {
			n += c
		}
	}
	return n
}

func fmtEV(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *p)
}

// printEvals is the comparison table across the campaign's checkpoints.
func printEvals(w io.Writer, st workflows.CampaignState) { printComparison(w, st.Evals) }
