package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// resolveCheckpoints turns --checkpoint references into stored checkpoints.
// A reference is CAMPAIGN:LABEL (init, sft, warmup, step-0003, latest), the
// name of a saved checkpoint as reports print it, or a directory holding a
// manifest.json (imported into the store). The trainer is the one the named
// campaigns are pinned to, where the checkpoints are loaded (nil: none
// named, or campaigns from before pinning); campaigns pinned to different
// trainers are refused.
func resolveCheckpoints(ctx context.Context, c client.Client, st store.Store, arg string) ([]workflows.NamedCheckpoint, *gpu.TrainerRef, error) {
	var out []workflows.NamedCheckpoint
	var trainer *gpu.TrainerRef
	seen := map[string]bool{}
	for _, ref := range strings.Split(arg, ",") {
		ref = strings.TrimSpace(ref)
		if ref == "" {
			continue
		}
		if seen[ref] {
			return nil, nil, badInput(fmt.Errorf("--checkpoint %q is named twice", ref))
		}
		seen[ref] = true
		ck, tr, err := resolveCheckpointOn(ctx, c, st, ref)
		if err != nil {
			return nil, nil, err
		}
		if tr != nil && trainer != nil && tr.Name != trainer.Name {
			return nil, nil, badInput(fmt.Errorf("--checkpoint %q: its campaign is pinned to trainer %s, an earlier one's to %s: "+
				"evaluate one trainer's checkpoints at a time", ref, tr.Name, trainer.Name))
		}
		if tr != nil {
			trainer = tr
		}
		out = append(out, workflows.NamedCheckpoint{Label: ref, Checkpoint: ck})
	}
	if len(out) == 0 {
		return nil, nil, badInput(errors.New("--checkpoint: name at least one checkpoint"))
	}
	return out, trainer, nil
}

func resolveCheckpoint(ctx context.Context, c client.Client, st store.Store, ref string) (gpu.Checkpoint, error) {
	ck, _, err := resolveCheckpointOn(ctx, c, st, ref)
	return ck, err
}

// resolveCheckpointOn is resolveCheckpoint and, for CAMPAIGN:LABEL, the
// trainer the campaign is pinned to.
func resolveCheckpointOn(ctx context.Context, c client.Client, st store.Store, ref string) (gpu.Checkpoint, *gpu.TrainerRef, error) {
	if fi, err := os.Stat(ref); err == nil && fi.IsDir() {
		mb, err := os.ReadFile(filepath.Join(ref, "manifest.json"))
		if err != nil {
			return gpu.Checkpoint{}, nil, badInput(fmt.Errorf("--checkpoint %s: a checkpoint directory needs a manifest.json: %w", ref, err))
		}
		sum := sha256.Sum256(mb)
		abs, _ := filepath.Abs(ref)
		ck, err := gpu.ImportCheckpoint(ctx, st, ref, "import/"+filepath.Base(abs)+"-"+hex.EncodeToString(sum[:])[:12])
		if err != nil {
			return ck, nil, badInput(fmt.Errorf("--checkpoint %s: %w", ref, err))
		}
		return ck, nil, nil
	}
	name := ref
	var trainer *gpu.TrainerRef
	if camp, label, ok := strings.Cut(ref, ":"); ok {
		var err error
		if name, trainer, err = campaignCheckpointName(ctx, c, st, camp, label); err != nil {
			return gpu.Checkpoint{}, nil, err
		}
	}
	ck, err := gpu.FindCheckpoint(ctx, st, name)
	if errors.Is(err, store.ErrNotFound) {
		return ck, nil, badInput(fmt.Errorf("--checkpoint %q: no checkpoint %q in the store (name one as CAMPAIGN:LABEL, by the name reports print, or as a directory with a manifest.json)", ref, name))
	}
	if err != nil {
		return ck, nil, fmt.Errorf("--checkpoint %q: %w", ref, err)
	}
	// Whatever named it uses it: its campaign's retention (checkpoints.keep_last) keeps it.
	if err := gpu.PinCheckpoint(ctx, st, ck.Name, "starter: "+ref); err != nil {
		return ck, nil, err
	}
	return ck, trainer, nil
}

// campaignCheckpointName maps CAMPAIGN:LABEL to a checkpoint name, asking the
// campaign (or its stored report) for its epoch, latest checkpoint and the
// trainer it is pinned to.
func campaignCheckpointName(ctx context.Context, c client.Client, st store.Store, camp, label string) (string, *gpu.TrainerRef, error) {
	var epoch, latest string
	var trainer *gpu.TrainerRef
	v, err := c.QueryWorkflow(ctx, ids.CampaignWorkflowID(camp), "", workflows.QueryStatus)
	var s workflows.CampaignStatus
	if err == nil && v.Get(&s) == nil && s.Epoch != "" {
		epoch, latest = s.Epoch, s.Checkpoint
		if s.Trainer != "" {
			trainer = &gpu.TrainerRef{Name: s.Trainer, Queue: ids.TrainerQueue(s.Trainer)}
		}
	} else {
		var rep workflows.CampaignReportData
		ref, lerr := st.Lookup(ctx, "campaigns/"+ids.Clean(camp)+"/report.json")
		if lerr != nil || store.GetJSON(ctx, st, ref, &rep) != nil || rep.State.Epoch == "" {
			why := "no report in the store"
			if err != nil {
				why += "; query: " + err.Error()
			}
			return "", nil, badInput(fmt.Errorf("--checkpoint %s:%s: cannot find campaign %q (%s)", camp, label, camp, why))
		}
		epoch, trainer = rep.State.Epoch, rep.State.Trainer
		if rep.State.Checkpoint != nil {
			latest = rep.State.Checkpoint.Name
		}
	}
	switch label {
	case "latest", "final":
		if latest == "" {
			return "", nil, badInput(fmt.Errorf("--checkpoint %s:%s: the campaign has saved no checkpoint yet", camp, label))
		}
		return latest, trainer, nil
	case "base":
		label = "init"
	}
	return camp + "/" + epoch + "/" + label, trainer, nil
}

// inferenceInUse refuses to load weights into servers a running campaign
// samples from: its rollouts would turn stale. --force skips the check.
func inferenceInUse(ctx context.Context, c client.Client, urls []string) error {
	want := map[string]bool{}
	for _, u := range urls {
		want[strings.TrimRight(u, "/")] = true
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: `WorkflowType = "CampaignWorkflow" AND ExecutionStatus = "Running"`, PageSize: 100})
	if err != nil {
		return err
	}
	for _, e := range resp.Executions {
		v, err := c.QueryWorkflow(ctx, e.Execution.WorkflowId, "", workflows.QueryStatus)
		var s workflows.CampaignStatus
		if err != nil || v.Get(&s) != nil {
			continue
		}
		for _, u := range s.Inference {
			if want[strings.TrimRight(u, "/")] {
				return badInput(fmt.Errorf("campaign %s is running and samples from %s: loading checkpoints there would make its rollouts stale (pause it, name other servers with --inference, or pass --force)", s.Name, u))
			}
		}
	}
	return nil
}

// CheckpointJSON is one checkpoint's row of `starter eval --checkpoint --json`.
type CheckpointJSON struct {
	Label         string `json:"label"`
	Checkpoint    string `json:"checkpoint"`
	WeightVersion string `json:"weight_version"`
	// ResolvedRate is over every rollout (Harbor's: an unscored one counts
	// as 0); ScoredResolvedRate over the Scored alone.
	Resolved           int                        `json:"resolved"`
	ResolvedRate       float64                    `json:"resolved_rate"`
	Unscored           int                        `json:"unscored"`
	ScoredResolvedRate float64                    `json:"scored_resolved_rate"`
	PassAtK            map[string]float64         `json:"pass_at_k,omitempty"`
	HarborMeanReward   float64                    `json:"harbor_mean_reward"`
	MeanReward         float64                    `json:"mean_reward"`
	MeanTurns          float64                    `json:"mean_turns"`
	Timeouts           int                        `json:"timeouts"`    // agent timeout reached
	TurnCapped         int                        `json:"turn_capped"` // turn cap reached
	Rollouts           int                        `json:"rollouts"`
	Scored             int                        `json:"scored"`
	ByCategory         map[string]workflows.Group `json:"by_category"`
	ByDifficulty       map[string]workflows.Group `json:"by_difficulty"`
	PolicyVersions     map[string]int             `json:"policy_versions"`
	Report             store.Ref                  `json:"report"`
}

func checkpointsJSON(w io.Writer, wid string, in workflows.CheckpointEvalInput, res workflows.CheckpointEvalResult) error {
	rows := []CheckpointJSON{}
	for i, e := range res.Evals {
		s := e.Summary
		rows = append(rows, CheckpointJSON{Label: e.Label, Checkpoint: in.Checkpoints[i].Checkpoint.Name, WeightVersion: e.WeightVersion,
			Resolved: s.Resolved, ResolvedRate: s.ResolvedRate, Unscored: s.Unscored, ScoredResolvedRate: s.ScoredResolvedRate,
			PassAtK: s.PassAtK, HarborMeanReward: s.HarborMeanReward, MeanReward: s.MeanReward, MeanTurns: s.MeanTurns, Timeouts: s.AgentEnds[workflows.AgentEndTimeout], TurnCapped: s.AgentEnds[workflows.AgentEndTurnCap],
			Rollouts: s.Rollouts, Scored: s.Scored, ByCategory: s.ByCategory, ByDifficulty: s.ByDifficulty,
			PolicyVersions: s.PolicyVersions, Report: e.Report})
	}
	return json.NewEncoder(w).Encode(map[string]any{"workflow_id": wid, "sweep_id": res.SweepID, "checkpoints": rows, "report": res.Report})
}

// printComparison is the comparison table across checkpoints, with a
// warning where a checkpoint's rollouts were sampled by other weights.
// RESOLVED is over every rollout, as the eval table's headline (an unscored
// one counts as 0; UNSCORED says how many), and so are the groups.
func printComparison(w io.Writer, evals []workflows.CheckpointEval) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tPOLICY\tRESOLVED\tUNSCORED\tPASS@K\tMEAN REWARD\tMEAN TURNS\tTIMEOUTS\tTURN CAP\tBY CATEGORY\tBY DIFFICULTY")
	var warn []string
	for _, e := range evals {
		s := e.Summary
		fmt.Fprintf(tw, "%s\t%s\t%d/%d %.1f%%\t%d\t%s\t%.3f\t%.1f\t%d\t%d\t%s\t%s\n", e.Label, e.WeightVersion, s.Resolved, s.Rollouts, 100*s.ResolvedRate,
			s.Unscored, passAtK(s.PassAtK, "-"), s.MeanReward, s.MeanTurns, s.AgentEnds[workflows.AgentEndTimeout], s.AgentEnds[workflows.AgentEndTurnCap], groups(s.ByCategory), groups(s.ByDifficulty))
		for v, n := range s.PolicyVersions {
			if v != e.WeightVersion {
				warn = append(warn, fmt.Sprintf("warning: %s: %d rollout(s) sampled by %s, not %s (weights changed during the sweep)", e.Label, n, v, e.WeightVersion))
			}
		}
	}
	tw.Flush()
	for _, l := range warn {
		fmt.Fprintln(w, l)
	}
}

func groups(m map[string]workflows.Group) string {
	var out []string
	for _, k := range sortedStrings(m) {
		g := m[k]
		out = append(out, fmt.Sprintf("%s %d/%d", k, g.Resolved, g.Rollouts))
	}
	return strings.Join(out, ", ")
}

// warnNoWorker says so when no worker polls a queue: the work would wait.
func warnNoWorker(ctx context.Context, c client.Client, queue, role string, w io.Writer) {
	resp, err := c.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err == nil && len(resp.Pollers) == 0 {
		fmt.Fprintf(w, "warning: no worker polls %s: nothing runs until one with the %s role starts (bin/worker -role %s, or make worker)\n", queue, role, role)
	}
}

// startCheckpointEval starts (or finds) the sweep over checkpoints and, when
// asked, waits and prints the comparison.
func startCheckpointEval(ctx context.Context, c client.Client, in workflows.CheckpointEvalInput, n int, wait, asJSON bool, stdout, stderr io.Writer) error {
	wid := ids.CheckpointEvalWorkflowID(in.SweepID)
	labels := make([]string, len(in.Checkpoints))
	for i, ck := range in.Checkpoints {
		labels[i] = ck.Label
	}
	run, existing, err := startOrFind(ctx, c, wid, client.StartWorkflowOptions{
		ID: wid, TaskQueue: ids.ControlQueue,
		StaticSummary: fmt.Sprintf("eval %d tasks at checkpoints %s", n, strings.Join(labels, ", ")),
	}, workflows.CheckpointEvalWorkflow, in)
	if err != nil {
		return fmt.Errorf("start checkpoint eval: %w", err)
	}
	warnNoWorker(ctx, c, ids.GPUQueue, "gpu", stderr)
	announce(infoOut(asJSON, stdout, stderr), wid, existing, fmt.Sprintf("found existing checkpoint eval %s (use --new for another)", wid),
		fmt.Sprintf("checkpoint eval %s: %d tasks × %d attempts at %d checkpoints", wid, n, in.Eval.Attempts, len(in.Checkpoints)))
	if !wait && !asJSON {
		return nil
	}
	var res workflows.CheckpointEvalResult
	if err := waitWithProgress(ctx, c, run, stderr, "checkpoints done", &res); err != nil {
		return err
	}
	if asJSON {
		return checkpointsJSON(stdout, wid, in, res)
	}
	printComparison(stdout, res.Evals)
	for _, e := range res.Evals {
		fmt.Fprintf(stdout, "%s: %s\n", e.Label, e.Report.URI)
	}
	return nil
}
