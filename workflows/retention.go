package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
)

// Checkpoint retention (checkpoints.keep_last, docs/campaigns.md): after
// each PPO step's checkpoint is saved and served, the step checkpoints older
// than the newest keep_last are deleted from the store, except those a
// resume or an eval needs: init, sft and warmup are never step checkpoints;
// the newest (what a resume reloads), the last step's (the final one), every
// one a recorded eval of the campaign evaluated, with ppo.collapse_share the
// best step's (a RewardCollapse names it to go back to), and every one pinned in the
// store (an eval sweep over it or a campaign started from it, gpu.PinCheckpoint)
// are kept. A failed deletion is logged and asked again after the next step:
// it never fails the step.

// Retention is what the campaign's checkpoint retention did, in its report.
type Retention struct {
	Deleted    []string `json:"deleted"`          // checkpoints deleted from the store
	Pinned     []string `json:"pinned,omitempty"` // kept though past keep_last: pinned
	BytesFreed int64    `json:"bytes_freed"`
}

// retain deletes the step checkpoints the policy no longer keeps.
func (c *campaignRun) retain(ctx workflow.Context) {
	names := c.prunable()
	if len(names) == 0 {
		return
	}
	var res gpu.PruneResult
	err := workflow.ExecuteActivity(c.gpuCtx(ctx, fmt.Sprintf("delete %d checkpoints past checkpoints.keep_last = %d", len(names), c.cfg.Checkpoints.KeepLast)),
		gact.PruneCheckpoints, gpu.PruneInput{Names: names}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Warn("checkpoints not deleted (asked again after the next step)", "checkpoints", names, "error", err)
		return
	}
	r := c.st.Retention
	if r == nil {
		r = &Retention{Deleted: []string{}}
		c.st.Retention = r
	}
	r.Deleted, r.Pinned, r.BytesFreed = append(r.Deleted, res.Deleted...), append(r.Pinned, res.Pinned...), r.BytesFreed+res.Bytes
	workflow.GetLogger(ctx).Info("checkpoint retention", "deleted", res.Deleted, "pinned", res.Pinned, "bytes", res.Bytes)
}

// prunable lists the step checkpoints past keep_last that nothing keeps and
// that were not deleted (or found pinned) before, oldest first.
func (c *campaignRun) prunable() []string {
	keep := map[string]bool{}
	if c.st.Checkpoint != nil {
		keep[c.st.Checkpoint.Name] = true
	}
	keep[c.key(fmt.Sprintf("step-%04d", c.cfg.PPO.Steps))] = true
	for _, e := range c.st.Evals {
		keep[c.key(e.Label)] = true
	}
	if b := c.bestStep(); c.cfg.PPO.CollapseShare > 0 && b != nil {
		keep[b.Checkpoint] = true // what a RewardCollapse pause names to go back to
	}
	if r := c.st.Retention; r != nil {
		for _, n := range append(append([]string{}, r.Deleted...), r.Pinned...) {
			keep[n] = true
		}
	}
	var steps []string
	for _, s := range c.st.Steps {
		if s.Checkpoint != "" {
			steps = append(steps, s.Checkpoint)
		}
	}
	var out []string
	for i, n := range steps {
		if i < len(steps)-c.cfg.Checkpoints.KeepLast && !keep[n] {
			out = append(out, n)
		}
	}
	return out
}
