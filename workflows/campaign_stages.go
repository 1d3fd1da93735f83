package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/tfevents"
)

// The campaign's stages: checkpoints loaded into inference, SFT, and the eval
// sweeps, critic warm-up and PPO steps it runs as child workflows.

func (c *campaignRun) controlCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{errs.BadInput, errs.TaskInvalid}},
		Summary: summary,
	})
}

func (c *campaignRun) agent() activities.AgentSpec {
	p := c.cfg.Policy
	return activities.AgentSpec{Kind: activities.AgentPolicy, Inference: c.st.URLs, MaxNewTokens: p.MaxNewTokens, Temperature: p.Temperature, MaxContext: p.MaxContext, Harness: p.Harness, HandoffTokens: p.HandoffTokens}
}

// batch is the tasks rolled out by the current policy for training.
func (c *campaignRun) batch(tasks []task.Ref) RolloutBatch {
	return RolloutBatch{Campaign: c.cfg.Name, KeyPrefix: c.trainKey(""), Tasks: tasks, Agent: c.agent(), Version: c.st.WeightVersion,
		Preset: c.cfg.Policy.Preset, TurnCap: c.cfg.PPO.TurnCap, S: c.cfg.S, Concurrency: c.st.Concurrency, DeadlineMinutes: c.cfg.PPO.StepDeadlineMinutes,
		Trainer: c.st.Trainer}
}

func (c *campaignRun) poolTasks(ctx workflow.Context, pool string, n int, seed int) ([]task.Ref, error) {
	var refs []task.Ref
	err := workflow.ExecuteActivity(c.controlCtx(ctx, "tasks of "+pool), act.SampleTasks,
		activities.SampleInput{Pool: pool, N: n, Seed: fmt.Sprintf("%s/%d", c.cfg.Name, seed), Cycle: seed > 0}).Get(ctx, &refs)
	return refs, err
}

// key is a checkpoint name of this campaign epoch.
func (c *campaignRun) key(what string) string { return c.cfg.Name + "/" + c.st.Epoch + "/" + what }

// trainKey is a trainer idempotency key of this campaign epoch; after a
// resume that had to reload the trainer, under the resume's tag
// (campaign_resume.go).
func (c *campaignRun) trainKey(what string) string { return c.key(c.st.KeyTag + what) }

// checkpoint saves the trainer's weights and loads them into inference.
func (c *campaignRun) checkpoint(ctx workflow.Context, label string) error {
	var ck gpu.Checkpoint
	if err := workflow.ExecuteActivity(c.gpuCtx(ctx, "save checkpoint "+label), gact.TrainerSave, gpu.SaveInput{Name: c.key(label)}).Get(ctx, &ck); err != nil {
		return c.gone(err)
	}
	var version string
	lctx := c.gpuCtx(ctx, "load "+label+" into inference")
	var load workflow.Future
	if workflow.GetVersion(ctx, "load-every-replica", workflow.DefaultVersion, 1) == 1 {
		// Every replica the rollouts sample from gets the weights, not only
		// the GPU worker's local server.
		load = workflow.ExecuteActivity(lctx, gact.InferenceLoadAll, gpu.LoadInput{Checkpoint: ck, URLs: c.cfg.Policy.Inference})
	} else {
		load = workflow.ExecuteActivity(lctx, gact.InferenceLoad, ck)
	}
	if err := load.Get(ctx, &version); err != nil {
		return c.gone(err)
	}
	if version != ck.WeightVersion {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("inference serves %s after loading checkpoint %s (%s)", version, label, ck.WeightVersion), errs.Infra, nil)
	}
	c.st.Checkpoint, c.st.WeightVersion = &ck, version
	return nil
}

// loadInit loads the campaign's configured init into the trainer (taking the
// trainer's lease) and then, as the "init" checkpoint, into inference: a
// campaign never starts from what another one left in the trainer.
func (c *campaignRun) loadInit(ctx workflow.Context) error {
	if c.init == nil && c.cfg.Policy.Init != "random" {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("campaign %s: policy.init = %q was not resolved to a stored checkpoint (start it with `starter campaign start`, which does)", c.cfg.Name, c.cfg.Policy.Init), errs.BadInput, nil)
	}
	in := gpu.InitInput{Campaign: c.cfg.Name, Checkpoint: c.init, Seed: c.cfg.Policy.Seed}
	summary := fmt.Sprintf("load init %s (seed %d) into the trainer", c.cfg.Policy.Init, c.cfg.Policy.Seed)
	if c.init != nil {
		summary = "load init " + c.init.Name + " into the trainer"
	}
	if err := workflow.ExecuteActivity(c.gpuCtx(ctx, summary), gact.TrainerInit, in).Get(ctx, nil); err != nil {
		return c.gone(err)
	}
	return c.checkpoint(ctx, "init")
}

// evalStage is an eval as a stage: a failed sweep pauses the campaign.
func (c *campaignRun) evalStage(ctx workflow.Context, label string) error {
	_, err := c.stage(ctx, "eval-"+label, func(int) error { return c.eval(ctx, label) })
	return err
}

func (c *campaignRun) eval(ctx workflow.Context, label string) error {
	for _, e := range c.st.Evals {
		if e.Label == label {
			return nil
		}
	}
	var tasks []task.Ref
	for _, p := range c.cfg.Pools.Eval {
		ts, err := c.poolTasks(ctx, p, 0, 0)
		if err != nil {
			return err
		}
		tasks = append(tasks, ts...)
	}
	if len(tasks) == 0 {
		return nil
	}
	c.inFlight = "eval " + label
	c.details(ctx)
	sweep := ids.CampaignEvalSweepID(c.cfg.Name, label)
	cctx := cancelledChildCtx(ctx, ids.EvalSweepWorkflowID(sweep), fmt.Sprintf("eval %s at %s (%s)", c.cfg.Name, label, c.st.WeightVersion))
	var res EvalSweepResult
	err := workflow.ExecuteChildWorkflow(cctx, EvalSweepWorkflow, EvalSweepInput{
		SweepID: sweep, Tasks: tasks, Agent: c.agent(), Attempts: c.cfg.Eval.Attempts, Concurrency: c.cfg.Eval.Concurrency,
		TurnCap: c.cfg.Eval.TurnCap, S: c.cfg.S,
	}).Get(ctx, &res)
	if err != nil {
		return err
	}
	c.st.Evals = append(c.st.Evals, CheckpointEval{Label: label, WeightVersion: c.st.WeightVersion, Summary: res.Summary, Report: res.Report})
	c.inFlight = ""
	return nil
}

func (c *campaignRun) sft(ctx workflow.Context) error {
	c.inFlight = "sft"
	c.details(ctx)
	pool := c.cfg.Pools.SFT
	if pool == "" { // the training pool, as before pools.sft existed
		pool = c.cfg.Pools.Train
	}
	tasks, err := c.poolTasks(ctx, pool, 64, -1)
	if err != nil {
		return err
	}
	futs := make([]workflow.Future, len(tasks))
	for i, t := range tasks {
		futs[i] = workflow.ExecuteActivity(c.controlCtx(ctx, "render SFT sample of "+t.Name), act.RenderSFT,
			activities.RenderSFTInput{Task: t, Inference: c.st.URLs, Campaign: c.cfg.Name, Harness: c.cfg.Policy.Harness})
	}
	var batch []gpu.TrajectoryRef
	for i, f := range futs {
		var r activities.RenderSFTResult
		if err := f.Get(ctx, &r); err != nil {
			workflow.GetLogger(ctx).Warn("no SFT sample", "task", tasks[i].Name, "error", err)
			continue
		}
		batch = append(batch, gpu.TrajectoryRef{Trajectory: r.Trajectory, TaskID: tasks[i].ID})
	}
	if len(batch) == 0 {
		return temporal.NewNonRetryableApplicationError("sft: no task of pool "+pool+" rendered a sample", errs.BadInput, nil)
	}
	hyper := map[string]any{"epochs": c.cfg.SFT.Epochs}
	if c.cfg.SFT.ActorLR > 0 {
		hyper["actor_lr"] = c.cfg.SFT.ActorLR
	}
	if c.cfg.SFT.Minibatches > 0 {
		hyper["minibatches"] = c.cfg.SFT.Minibatches
	}
	if c.cfg.SFT.LRSchedule != "" {
		hyper["lr_schedule"] = c.cfg.SFT.LRSchedule // only when set: a history without it sends the same input
	}
	var m gpu.Metrics
	if err := workflow.ExecuteActivity(c.gpuCtx(ctx, "sft"), gact.TrainerSFT, gpu.TrainInput{
		Key: c.trainKey("sft/0"), Trajectories: batch, Preset: c.cfg.Policy.Preset, Hyper: hyper,
	}).Get(ctx, &m); err != nil {
		return c.gone(err)
	}
	return c.checkpoint(ctx, "sft")
}

// warmup runs the critic warm-up; a retry (attempt > 0) is a new warm-up
// under its own trainer keys, on fresh rollouts.
func (c *campaignRun) warmup(ctx workflow.Context, attempt int) error {
	c.inFlight = "critic warm-up"
	c.details(ctx)
	tasks, err := c.poolTasks(ctx, c.cfg.Pools.Warmup, 0, 0)
	if err != nil {
		return err
	}
	cctx := cancelledChildCtx(ctx, ids.WarmupWorkflowID(c.cfg.Name), "critic warm-up of "+c.cfg.Name)
	var res WarmupResult
	w := c.cfg.CriticWarmup
	b := c.batch(tasks)
	if attempt > 0 {
		b.KeyPrefix = c.trainKey(fmt.Sprintf("warmup-retry-%d/", attempt))
	}
	err = c.runBatch(ctx, workflow.ExecuteChildWorkflow(cctx, CriticWarmupWorkflow, WarmupInput{
		RolloutBatch: b, Epochs: w.Epochs, FitEpochs: w.FitEpochs, Gate: w.EVGate, MaxRounds: w.MaxRounds, Advisory: !w.RequireGate,
		CriticLR: c.cfg.PPO.CriticLR,
	}), &res)
	if err != nil {
		if gateMissed(err, &res) {
			c.warmedUp(res)
		}
		return err
	}
	c.warmedUp(res)
	// critic_fit moved the trainer's version; inference must serve the same weights.
	return c.checkpoint(ctx, "warmup")
}

// warmedUp records what a warm-up measured and what its rollouts lost.
func (c *campaignRun) warmedUp(res WarmupResult) {
	c.st.ColdEV, c.st.WarmEV, c.st.WarmCeiling, c.st.WarmupGate = res.ColdEV, res.WarmEV, res.WarmCeiling, res.Gate
	c.excluded(res.Aborted, res.Failed, res.Stale)
}

// excluded adds rollouts left out of a batch to the campaign's totals.
func (c *campaignRun) excluded(aborted, failed, stale int) {
	c.st.Aborted, c.st.Failed, c.st.Stale = c.st.Aborted+aborted, c.st.Failed+failed, c.st.Stale+stale
}

// gateMissed reads the result a warm-up that missed its required gate
// carries in its error (histories before it carry none: false).
func gateMissed(err error, res *WarmupResult) bool {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.WarmupGate || !ae.HasDetails() {
		return false
	}
	return ae.Details(res) == nil
}

func (c *campaignRun) ppoStep(ctx workflow.Context, step int) error {
	c.inFlight = fmt.Sprintf("ppo step %d", step)
	c.details(ctx)
	ahead := c.lookAhead(ctx)                          // lookahead.go
	c.over, c.stepRun = c.oversampling(ctx, ahead), "" // oversample.go
	var fut workflow.ChildWorkflowFuture
	if ahead {
		fut = c.takeAhead(ctx, step)
	}
	if fut == nil {
		tasks, need, err := c.stepTasks(ctx, step, len(c.st.Carried))
		if err != nil {
			return err
		}
		cctx := cancelledChildCtx(ctx, ids.PPOStepWorkflowID(c.cfg.Name, step), fmt.Sprintf("%s PPO step %d", c.cfg.Name, step))
		b := c.batch(tasks)
		b.MaxStaleness = c.cfg.PPO.MaxStaleness
		if c.over {
			b.Need, b.Carried = need, c.st.Carried
		}
		in := c.stepInput(ctx, b, step)
		in.NotifyParent = ahead
		fut = workflow.ExecuteChildWorkflow(cctx, PPOStepWorkflow, in)
	}
	var res StepRecord
	if err := c.awaitStep(ctx, step, fut, ahead, &res); err != nil {
		counted := c.countRefused(err)
		if c.over {
			c.dropCarried(ctx, carriedOf(err), counted)
		}
		return err
	}
	c.handedOn(step, &res)
	c.excluded(res.Aborted, res.Failed, res.Stale)
	if err := c.checkpoint(ctx, fmt.Sprintf("step-%04d", step)); err != nil {
		return err
	}
	res.Checkpoint = c.st.Checkpoint.Name
	c.st.Steps = append(c.st.Steps, res)
	if workflow.GetVersion(ctx, "tensorboard-events", workflow.DefaultVersion, 1) == 1 {
		c.storeEvents(ctx, res)
	}
	if c.cfg.Checkpoints.KeepLast > 0 && workflow.GetVersion(ctx, "checkpoint-retention", workflow.DefaultVersion, 1) == 1 {
		c.retain(ctx)
	}
	return nil
}

// stepInput is step's child input on batch b: the campaign's step settings
// and its reward floor (the caller sets how it runs beside its neighbours).
func (c *campaignRun) stepInput(ctx workflow.Context, b RolloutBatch, step int) PPOStepInput {
	in := PPOStepInput{RolloutBatch: b, Step: step, MaxFailedShare: c.cfg.PPO.MaxFailedShare, Hyper: c.cfg.PPOHyper()}
	in.RewardFloor, in.FloorOf = c.rewardFloor(ctx, step)
	return in
}

// rewardFloor is the mean reward under which step's batch is not trained on:
// ppo.collapse_share of the best earlier step's (the steps recorded so far:
// a step started ahead does not count the one still training). A step an
// operator retried after a RewardCollapse has none: it trains on what it
// earns.
func (c *campaignRun) rewardFloor(ctx workflow.Context, step int) (float64, string) {
	share := c.cfg.PPO.CollapseShare
	if share <= 0 || slices.Contains(c.st.FloorWaived, fmt.Sprintf("ppo-%d", step)) ||
		workflow.GetVersion(ctx, "collapse-guard", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return 0, ""
	}
	best := c.bestStep()
	if best == nil || best.RewardMean <= 0 {
		return 0, ""
	}
	return share * best.RewardMean, fmt.Sprintf("collapse_share %g of step %d's %.3f; its checkpoint %s", share, best.Step, best.RewardMean, best.Checkpoint)
}

// bestStep is the trained step with the highest mean reward so far (the
// first of equals), or nil.
func (c *campaignRun) bestStep() *StepRecord {
	var best *StepRecord
	for i, s := range c.st.Steps {
		if !s.Skipped && s.Trained > 0 && (best == nil || s.RewardMean > best.RewardMean) {
			best = &c.st.Steps[i]
		}
	}
	return best
}

// storeEvents writes the step's metrics as a TensorBoard event file under
// campaigns/<name>/tensorboard/<name>/ (the run is the campaign), one file
// per step, so `tensorboard --logdir <store>/campaigns/<name>/tensorboard`
// shows the curves while the campaign runs. The first step's file also holds
// the warm-up's cold and warm explained variance at step 0. A failed write
// is logged, not a failed step: the step record is the source of truth.
func (c *campaignRun) storeEvents(ctx workflow.Context, res StepRecord) {
	steps := map[int64]map[string]float64{int64(res.Step): StepScalars(res)}
	if res.Step == 1 {
		w := map[string]float64{}
		if c.st.ColdEV != nil {
			w["critic/warmup_ev_cold"] = *c.st.ColdEV
		}
		if c.st.WarmEV != nil {
			w["critic/warmup_ev_warm"] = *c.st.WarmEV
		}
		if c.st.WarmCeiling != nil {
			w["critic/warmup_ev_ceiling"] = *c.st.WarmCeiling
		}
		steps[0] = w
	}
	now := workflow.Now(ctx)
	wall := float64(now.UnixNano()) / 1e9
	name := ids.Clean(c.cfg.Name)
	key := fmt.Sprintf("campaigns/%s/tensorboard/%s/%s", name, name, tfevents.FileName(wall, fmt.Sprintf("%s.step-%06d", ids.Clean(c.st.Epoch), res.Step)))
	err := workflow.ExecuteActivity(c.controlCtx(ctx, fmt.Sprintf("TensorBoard events of step %d", res.Step)), act.StoreEvents,
		activities.StoreEventsInput{Key: key, WallTime: wall, Steps: steps}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("TensorBoard events not stored", "step", res.Step, "error", err)
	}
}

// StepScalars are a PPO step's numbers as TensorBoard tags: the trainer's
// metrics under ppo/ (explained_variance, policy_loss, approx_kl, ...), the
// rollouts' under rollout/.
func StepScalars(s StepRecord) map[string]float64 {
	out := map[string]float64{
		"rollout/reward_mean": s.RewardMean, "rollout/resolved_rate": s.ResolvedRate, "rollout/mean_turns": s.MeanTurns,
		"rollout/trained": float64(s.Trained), "rollout/aborted": float64(s.Aborted), "rollout/failed": float64(s.Failed),
		"rollout/stale": float64(s.Stale), "rollout/tampered": float64(s.Tampered), "rollout/verifier_errors": float64(s.VerifierErrors),
	}
	if s.MaxStaleness > 0 {
		// Trained rollouts by how many versions behind the step's policy they were sampled.
		n, sum, most := 0, 0, 0
		for k, c := range s.Staleness {
			n, sum = n+c, sum+k*c
			if c > 0 {
				most = k
			}
		}
		out["rollout/staleness_max"] = float64(most)
		if n > 0 {
			out["rollout/staleness_mean"] = float64(sum) / float64(n)
		}
	}
	oversampleScalars(s, out)
	//workflowcheck:ignore fills a map: the same map in any order
	for k, v := range s.Metrics {
		if f, ok := v.(float64); ok {
			out["ppo/"+k] = f
		}
	}
	return out
}

// runBatch waits for a child that rolls out a batch at the campaign's
// concurrency (a PPO step, the critic warm-up); while it runs,
// set_concurrency reaches it (setConcurrency).
func (c *campaignRun) runBatch(ctx workflow.Context, child workflow.ChildWorkflowFuture, res any) error {
	c.batchChild = child
	defer func() { c.batchChild = nil }()
	return child.Get(ctx, res)
}

// setConcurrency is the set_concurrency update: later batches start at n,
// and the running one, if any, is signalled to widen or narrow its window.
// Version 1 signals; before it a running batch kept its start-time width.
func (c *campaignRun) setConcurrency(ctx workflow.Context, n int) (CampaignStatus, error) {
	c.st.Concurrency = n
	if c.batchChild != nil && workflow.GetVersion(ctx, "set-concurrency-reaches-child", workflow.DefaultVersion, 1) == 1 {
		// Waits for the child to start; fails only if it has already closed.
		if err := c.batchChild.SignalChildWorkflow(ctx, SignalSetConcurrency, n).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("set_concurrency did not reach the running batch", "error", err)
		}
	}
	if c.ahead != nil { // only on histories with ppo-look-ahead
		if err := c.ahead.fut.SignalChildWorkflow(ctx, SignalSetConcurrency, n).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("set_concurrency did not reach the step started ahead", "error", err)
		}
	}
	return c.status(), nil
}
