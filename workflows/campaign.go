package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// gact is only used for method references to the GPU activities.
var gact *gpu.Activities

// Campaign phases.
const (
	PhaseBaseEval = "base_eval"
	PhaseSFT      = "sft"
	PhaseWarmup   = "critic_warmup"
	PhasePPO      = "ppo"
	PhaseFinal    = "final_eval"
	PhaseDone     = "done"
)

// Update and query names.
const (
	UpdatePause          = "pause"
	UpdateResume         = "resume"
	UpdateSetConcurrency = "set_concurrency"
)

// StepRecord is one PPO step's outcome.
type StepRecord struct {
	Step          int         `json:"step"`
	PolicyVersion string      `json:"policy_version"` // the version that sampled the step's rollouts
	Metrics       gpu.Metrics `json:"metrics"`
	Rollouts      int         `json:"rollouts"`
	Trained       int         `json:"trained"`
	Aborted       int         `json:"aborted"`
	Failed        int         `json:"failed"`
	Stale         int         `json:"stale"`
	RewardMean    float64     `json:"reward_mean"`
	MeanTurns     float64     `json:"mean_turns"`
	Checkpoint    string      `json:"checkpoint,omitempty"`
}

// CheckpointEval is an eval sweep at one checkpoint.
type CheckpointEval struct {
	Label         string    `json:"label"` // base, sft, step-0002, final
	WeightVersion string    `json:"weight_version"`
	Summary       Summary   `json:"summary"`
	Report        store.Ref `json:"report"`
}

// CampaignState is everything a campaign carries across continue-as-new:
// small values and references only.
type CampaignState struct {
	Phase         string           `json:"phase"`
	Step          int              `json:"step"` // last finished PPO step
	URLs          []string         `json:"urls"`
	WeightVersion string           `json:"weight_version"`
	Checkpoint    *gpu.Checkpoint  `json:"checkpoint,omitempty"`
	ColdEV        *float64         `json:"cold_ev,omitempty"`
	WarmEV        *float64         `json:"warm_ev,omitempty"`
	Steps         []StepRecord     `json:"steps"`
	Evals         []CheckpointEval `json:"evals"`
	Aborted       int              `json:"aborted"`
	Failed        int              `json:"failed"`
	Stale         int              `json:"stale"`
	Paused        bool             `json:"paused"`
	Concurrency   int              `json:"concurrency"`
	Runs          int              `json:"runs"` // workflow runs so far (continue-as-new)
	// Epoch names this execution of the campaign in trainer keys: a crash
	// resumes it (same keys, each step trained once); starting the campaign
	// again after it failed is a new epoch.
	Epoch string `json:"epoch"`
}

// CampaignInput is the config and, after continue-as-new, the state.
type CampaignInput struct {
	Config campaign.Config `json:"config"`
	State  *CampaignState  `json:"state,omitempty"`
}

// CampaignStatus is what the "status" query answers.
type CampaignStatus struct {
	Name          string       `json:"name"`
	Phase         string       `json:"phase"`
	Step          int          `json:"step"`
	Steps         int          `json:"steps"`
	Paused        bool         `json:"paused"`
	Concurrency   int          `json:"concurrency"`
	WeightVersion string       `json:"weight_version"`
	InFlight      string       `json:"in_flight,omitempty"`
	Aborted       int          `json:"aborted"`
	Failed        int          `json:"failed"`
	Stale         int          `json:"stale"`
	ColdEV        *float64     `json:"cold_ev,omitempty"`
	WarmEV        *float64     `json:"warm_ev,omitempty"`
	Recent        []StepRecord `json:"recent"`
	Evals         []string     `json:"evals"`
	// Epoch is in the campaign's checkpoint names: <name>/<epoch>/<label>.
	Epoch      string   `json:"epoch"`
	Checkpoint string   `json:"checkpoint,omitempty"` // the latest checkpoint's name
	Inference  []string `json:"inference"`            // the servers its rollouts sample from
}

// CampaignResult is the finished campaign and its report.
type CampaignResult struct {
	State  CampaignState `json:"state"`
	Report store.Ref     `json:"report"`
}

type campaignRun struct {
	cfg      campaign.Config
	st       *CampaignState
	inFlight string
}

// CampaignWorkflow runs the T1 recipe as one durable job: base eval, SFT,
// critic warm-up, PPO steps (each a child workflow, each checkpointed and
// loaded into inference), evals, and a report. Pause, resume and concurrency
// changes are updates; status is a query.
func CampaignWorkflow(ctx workflow.Context, in CampaignInput) (CampaignResult, error) {
	c := &campaignRun{cfg: in.Config, st: in.State}
	if c.st == nil {
		c.st = &CampaignState{Phase: PhaseBaseEval, Concurrency: in.Config.PPO.Concurrency, Steps: []StepRecord{}, Evals: []CheckpointEval{}}
	}
	c.st.Runs++
	if c.st.Epoch == "" {
		c.st.Epoch = workflow.GetInfo(ctx).FirstRunID
		if len(c.st.Epoch) > 8 {
			c.st.Epoch = c.st.Epoch[len(c.st.Epoch)-8:]
		}
	}
	if err := c.setup(ctx); err != nil {
		return CampaignResult{}, err
	}
	return c.run(ctx)
}

func (c *campaignRun) setup(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (CampaignStatus, error) { return c.status(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, UpdatePause, func(ctx workflow.Context) (CampaignStatus, error) {
		c.st.Paused = true
		c.details(ctx)
		return c.status(), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateResume, func(ctx workflow.Context) (CampaignStatus, error) {
		c.st.Paused = false
		c.details(ctx)
		return c.status(), nil
	}); err != nil {
		return err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSetConcurrency, func(ctx workflow.Context, n int) (CampaignStatus, error) {
		c.st.Concurrency = n
		return c.status(), nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n int) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("set_concurrency %d: must be between 1 and 1024", n)
		}
		return nil
	}})
	if err != nil {
		return err
	}
	return workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(c.cfg.Name), ids.Stage.ValueSet(c.st.Phase), ids.Step.ValueSet(int64(c.st.Step)))
}

func (c *campaignRun) status() CampaignStatus {
	s := CampaignStatus{Name: c.cfg.Name, Phase: c.st.Phase, Step: c.st.Step, Steps: c.cfg.PPO.Steps, Paused: c.st.Paused,
		Concurrency: c.st.Concurrency, WeightVersion: c.st.WeightVersion, InFlight: c.inFlight, Aborted: c.st.Aborted,
		Failed: c.st.Failed, Stale: c.st.Stale, ColdEV: c.st.ColdEV, WarmEV: c.st.WarmEV, Recent: []StepRecord{}, Evals: []string{},
		Epoch: c.st.Epoch, Inference: c.st.URLs}
	if c.st.Checkpoint != nil {
		s.Checkpoint = c.st.Checkpoint.Name
	}
	if n := len(c.st.Steps); n > 0 {
		s.Recent = c.st.Steps[max(0, n-3):]
	}
	for _, e := range c.st.Evals {
		s.Evals = append(s.Evals, fmt.Sprintf("%s: %.1f%% resolved, reward %.3f", e.Label, 100*e.Summary.ResolvedRate, e.Summary.MeanReward))
	}
	return s
}

func (c *campaignRun) details(ctx workflow.Context) {
	state := c.st.Phase
	if c.st.Paused {
		state += " (paused)"
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — step %d/%d, policy %s; aborted %d, failed %d, stale %d; %s",
		state, c.st.Step, c.cfg.PPO.Steps, c.st.WeightVersion, c.st.Aborted, c.st.Failed, c.st.Stale, c.inFlight))
	workflow.UpsertTypedSearchAttributes(ctx, ids.Stage.ValueSet(c.st.Phase), ids.Step.ValueSet(int64(c.st.Step)))
}

// gpuActivityCtx is how every trainer and inference call is made: long,
// heartbeated, and retried through trainer restarts (the idempotency key makes
// a retried step train once).
func gpuActivityCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.GPUQueue,
		StartToCloseTimeout: 4 * time.Hour,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 30, NonRetryableErrorTypes: []string{errs.BadInput}},
		Summary: summary,
	})
}

func (c *campaignRun) controlCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{errs.BadInput, errs.TaskInvalid}},
		Summary: summary,
	})
}

func (c *campaignRun) agent() activities.AgentSpec {
	p := c.cfg.Policy
	return activities.AgentSpec{Kind: activities.AgentPolicy, Inference: c.st.URLs, MaxNewTokens: p.MaxNewTokens, Temperature: p.Temperature, MaxContext: p.MaxContext}
}

func (c *campaignRun) poolTasks(ctx workflow.Context, pool string, n int, seed int) ([]task.Ref, error) {
	var refs []task.Ref
	err := workflow.ExecuteActivity(c.controlCtx(ctx, "tasks of "+pool), act.SampleTasks,
		activities.SampleInput{Pool: pool, N: n, Seed: fmt.Sprintf("%s/%d", c.cfg.Name, seed), Cycle: seed > 0}).Get(ctx, &refs)
	return refs, err
}

func (c *campaignRun) waitUnpaused(ctx workflow.Context) error {
	if c.st.Paused {
		c.details(ctx)
	}
	return workflow.Await(ctx, func() bool { return !c.st.Paused })
}

func (c *campaignRun) run(ctx workflow.Context) (CampaignResult, error) {
	st, cfg := c.st, c.cfg
	if len(st.URLs) == 0 {
		if len(cfg.Policy.Inference) > 0 {
			st.URLs = cfg.Policy.Inference
		} else {
			var info gpu.InferenceInfo
			if err := workflow.ExecuteActivity(gpuActivityCtx(ctx, "find the inference server"), gact.InferenceInfo).Get(ctx, &info); err != nil {
				return CampaignResult{}, err
			}
			st.URLs, st.WeightVersion = info.URLs, info.WeightVersion
		}
	}
	if st.Checkpoint == nil {
		// Inference starts from exactly the trainer's weights.
		if err := c.checkpoint(ctx, "init"); err != nil {
			return CampaignResult{}, err
		}
	}
	c.details(ctx)
	if st.Phase == PhaseBaseEval {
		if cfg.Eval.Base {
			if err := c.eval(ctx, "base"); err != nil {
				return CampaignResult{}, err
			}
		}
		st.Phase = PhaseSFT
	}
	if st.Phase == PhaseSFT {
		if cfg.SFT.Enabled {
			if err := c.waitUnpaused(ctx); err != nil {
				return CampaignResult{}, err
			}
			if err := c.sft(ctx); err != nil {
				return CampaignResult{}, err
			}
			if err := c.eval(ctx, "sft"); err != nil {
				return CampaignResult{}, err
			}
		}
		st.Phase = PhaseWarmup
	}
	if st.Phase == PhaseWarmup {
		if err := c.waitUnpaused(ctx); err != nil {
			return CampaignResult{}, err
		}
		if err := c.warmup(ctx); err != nil {
			return CampaignResult{}, err
		}
		st.Phase = PhasePPO
	}
	for st.Phase == PhasePPO && st.Step < cfg.PPO.Steps {
		if err := c.waitUnpaused(ctx); err != nil {
			return CampaignResult{}, err
		}
		step := st.Step + 1
		if err := c.ppoStep(ctx, step); err != nil {
			return CampaignResult{}, err
		}
		st.Step = step
		c.details(ctx)
		if cfg.Eval.Every > 0 && step%cfg.Eval.Every == 0 && step < cfg.PPO.Steps {
			if err := c.eval(ctx, fmt.Sprintf("step-%04d", step)); err != nil {
				return CampaignResult{}, err
			}
		}
		if step < cfg.PPO.Steps && (step%cfg.PPO.ContinueAsNewEvery == 0 || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) {
			// Start a fresh history, carrying only references and small values.
			return CampaignResult{}, workflow.NewContinueAsNewError(ctx, CampaignWorkflow, CampaignInput{Config: cfg, State: st})
		}
	}
	if st.Phase == PhasePPO {
		st.Phase = PhaseFinal
	}
	if st.Phase == PhaseFinal {
		if cfg.Eval.AtEnd {
			if err := c.eval(ctx, "final"); err != nil {
				return CampaignResult{}, err
			}
		}
		st.Phase = PhaseDone
	}
	c.inFlight = ""
	c.details(ctx)
	out := CampaignResult{State: *st}
	err := workflow.ExecuteActivity(c.controlCtx(ctx, "store the campaign report"), act.StoreJSON, activities.StoreJSONInput{
		Key: "campaigns/" + ids.Clean(cfg.Name) + "/report.json", Value: CampaignReportData{Config: cfg, State: *st},
	}).Get(ctx, &out.Report)
	return out, err
}

// CampaignReportData is the stored campaign report (starter report renders it).
type CampaignReportData struct {
	Config campaign.Config `json:"config"`
	State  CampaignState   `json:"state"`
}

// key is a trainer idempotency key (and checkpoint name) of this campaign epoch.
func (c *campaignRun) key(what string) string { return c.cfg.Name + "/" + c.st.Epoch + "/" + what }

// checkpoint saves the trainer's weights and loads them into inference.
func (c *campaignRun) checkpoint(ctx workflow.Context, label string) error {
	var ck gpu.Checkpoint
	if err := workflow.ExecuteActivity(gpuActivityCtx(ctx, "save checkpoint "+label), gact.TrainerSave, gpu.SaveInput{Name: c.key(label)}).Get(ctx, &ck); err != nil {
		return err
	}
	var version string
	lctx := gpuActivityCtx(ctx, "load "+label+" into inference")
	var load workflow.Future
	if workflow.GetVersion(ctx, "load-every-replica", workflow.DefaultVersion, 1) == 1 {
		// Every replica the rollouts sample from gets the weights, not only
		// the GPU worker's local server.
		load = workflow.ExecuteActivity(lctx, gact.InferenceLoadAll, gpu.LoadInput{Checkpoint: ck, URLs: c.cfg.Policy.Inference})
	} else {
		load = workflow.ExecuteActivity(lctx, gact.InferenceLoad, ck)
	}
	if err := load.Get(ctx, &version); err != nil {
		return err
	}
	if version != ck.WeightVersion {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("inference serves %s after loading checkpoint %s (%s)", version, label, ck.WeightVersion), errs.Infra, nil)
	}
	c.st.Checkpoint, c.st.WeightVersion = &ck, version
	return nil
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
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: ids.EvalSweepWorkflowID(sweep), TaskQueue: ids.ControlQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     fmt.Sprintf("eval %s at %s (%s)", c.cfg.Name, label, c.st.WeightVersion)})
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
	tasks, err := c.poolTasks(ctx, c.cfg.Pools.Train, 64, -1)
	if err != nil {
		return err
	}
	futs := make([]workflow.Future, len(tasks))
	for i, t := range tasks {
		futs[i] = workflow.ExecuteActivity(c.controlCtx(ctx, "render SFT sample of "+t.Name), act.RenderSFT,
			activities.RenderSFTInput{Task: t, Inference: c.st.URLs, Campaign: c.cfg.Name})
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
		return temporal.NewNonRetryableApplicationError("sft: no task of the training pool rendered a sample", errs.BadInput, nil)
	}
	var m gpu.Metrics
	if err := workflow.ExecuteActivity(gpuActivityCtx(ctx, "sft"), gact.TrainerSFT, gpu.TrainInput{
		Key: c.key("sft/0"), Trajectories: batch, Preset: c.cfg.Policy.Preset, Hyper: map[string]any{"epochs": c.cfg.SFT.Epochs},
	}).Get(ctx, &m); err != nil {
		return err
	}
	return c.checkpoint(ctx, "sft")
}

func (c *campaignRun) warmup(ctx workflow.Context) error {
	c.inFlight = "critic warm-up"
	c.details(ctx)
	tasks, err := c.poolTasks(ctx, c.cfg.Pools.Warmup, 0, 0)
	if err != nil {
		return err
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: ids.WarmupWorkflowID(c.cfg.Name), TaskQueue: ids.ControlQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     "critic warm-up of " + c.cfg.Name})
	var res WarmupResult
	err = workflow.ExecuteChildWorkflow(cctx, CriticWarmupWorkflow, WarmupInput{
		Campaign: c.cfg.Name, KeyPrefix: c.key(""), Tasks: tasks, Agent: c.agent(), TurnCap: c.cfg.PPO.TurnCap, S: c.cfg.S, Concurrency: c.st.Concurrency,
		Epochs: c.cfg.CriticWarmup.Epochs, FitEpochs: c.cfg.CriticWarmup.FitEpochs, Gate: c.cfg.CriticWarmup.EVGate,
		MaxRounds: c.cfg.CriticWarmup.MaxRounds, Preset: c.cfg.Policy.Preset, Version: c.st.WeightVersion,
	}).Get(ctx, &res)
	if err != nil {
		return err
	}
	c.st.ColdEV, c.st.WarmEV = res.ColdEV, res.WarmEV
	c.st.Aborted, c.st.Failed, c.st.Stale = c.st.Aborted+res.Aborted, c.st.Failed+res.Failed, c.st.Stale+res.Stale
	// critic_fit moved the trainer's version; inference must serve the same weights.
	return c.checkpoint(ctx, "warmup")
}

func (c *campaignRun) ppoStep(ctx workflow.Context, step int) error {
	c.inFlight = fmt.Sprintf("ppo step %d", step)
	c.details(ctx)
	tasks, err := c.poolTasks(ctx, c.cfg.Pools.Train, c.cfg.PPO.TasksPerStep, step)
	if err != nil {
		return err
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: ids.PPOStepWorkflowID(c.cfg.Name, step), TaskQueue: ids.ControlQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     fmt.Sprintf("%s PPO step %d", c.cfg.Name, step)})
	var res StepRecord
	err = workflow.ExecuteChildWorkflow(cctx, PPOStepWorkflow, PPOStepInput{
		Campaign: c.cfg.Name, KeyPrefix: c.key(""), Step: step, Tasks: tasks, Agent: c.agent(), TurnCap: c.cfg.PPO.TurnCap, S: c.cfg.S,
		Concurrency: c.st.Concurrency, MaxFailedShare: c.cfg.PPO.MaxFailedShare, Version: c.st.WeightVersion, Preset: c.cfg.Policy.Preset,
	}).Get(ctx, &res)
	if err != nil {
		return err
	}
	c.st.Aborted, c.st.Failed, c.st.Stale = c.st.Aborted+res.Aborted, c.st.Failed+res.Failed, c.st.Stale+res.Stale
	if err := c.checkpoint(ctx, fmt.Sprintf("step-%04d", step)); err != nil {
		return err
	}
	res.Checkpoint = c.st.Checkpoint.Name
	c.st.Steps = append(c.st.Steps, res)
	return nil
}

// PPOStepInput is one PPO step: the tasks, the sampling policy and version.
type PPOStepInput struct {
	Campaign       string               `json:"campaign"`
	KeyPrefix      string               `json:"key_prefix"` // trainer keys: <prefix>ppo/<step>
	Step           int                  `json:"step"`
	Tasks          []task.Ref           `json:"tasks"`
	Agent          activities.AgentSpec `json:"agent"`
	TurnCap        int                  `json:"turn_cap"`
	S              int                  `json:"s"`
	Concurrency    int                  `json:"concurrency"`
	MaxFailedShare float64              `json:"max_failed_share"`
	Version        string               `json:"version"` // the policy version rollouts must be sampled with
	Preset         string               `json:"preset"`
	Hyper          map[string]any       `json:"hyper,omitempty"`
}

// collected is a batch of trajectories and the rollouts left out of it.
type collected struct {
	batch                  []gpu.TrajectoryRef
	rollouts               int
	aborted, failed, stale int
	reward, turns          float64
}

// collect runs one rollout per task and keeps the trajectories sampled by the
// expected policy version; aborted, failed and stale rollouts are counted.
func collect(ctx workflow.Context, campaignName, stage string, step int, tasks []task.Ref, agent activities.AgentSpec, turnCap, s, conc int, version string, running *int) (collected, error) {
	var out collected
	// A task drawn twice in one step is two rollouts: attempts 1 and 2.
	attempt := make([]int, len(tasks))
	seen := map[string]int{}
	for i, t := range tasks {
		seen[t.ID]++
		attempt[i] = seen[t.ID]
	}
	err := slidingWindow(ctx, len(tasks), func() int { return conc }, running,
		func(i int) workflow.Future {
			return startRollout(ctx, RolloutInput{CampaignID: campaignName, Stage: stage, Step: step, Task: tasks[i], Attempt: attempt[i],
				Agent: agent, TurnCap: turnCap, S: s}, fmt.Sprintf("%s %s %d: %s", campaignName, stage, step, tasks[i].Name))
		},
		func(i int, f workflow.Future) {
			r := rolloutOutcome(ctx, f, RolloutInput{CampaignID: campaignName, Stage: stage, Step: step, Task: tasks[i], Attempt: attempt[i]})
			out.rollouts++
			switch {
			case r.Outcome == OutcomeAborted:
				out.aborted++
			case !r.Scored || r.Trajectory == nil:
				out.failed++
			case len(r.PolicyVersions) != 1 || r.PolicyVersions[0] != version:
				// Sampled by another policy version: never trained on.
				out.stale++
			default:
				out.batch = append(out.batch, gpu.TrajectoryRef{Trajectory: *r.Trajectory, Reward: r.Reward, PolicyVersion: r.PolicyVersions[0], TaskID: r.TaskID})
				out.reward += r.Reward
				out.turns += float64(r.Turns)
			}
		})
	return out, err
}

// PPOStepWorkflow rolls out the step's tasks with bounded concurrency, leaves
// out aborted, failed and stale rollouts (failing loudly when they exceed the
// allowed share), and runs the trainer's ppo_step under the step's
// idempotency key.
func PPOStepWorkflow(ctx workflow.Context, in PPOStepInput) (StepRecord, error) {
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.Campaign), ids.Stage.ValueSet("ppo"), ids.Step.ValueSet(int64(in.Step)))
	prog := Progress{Total: len(in.Tasks)}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return prog, nil }); err != nil {
		return StepRecord{}, err
	}
	col, err := collect(ctx, in.Campaign, "ppo", in.Step, in.Tasks, in.Agent, in.TurnCap, in.S, in.Concurrency, in.Version, &prog.Running)
	if err != nil {
		return StepRecord{}, err
	}
	rec := StepRecord{Step: in.Step, PolicyVersion: in.Version, Rollouts: col.rollouts, Trained: len(col.batch), Aborted: col.aborted, Failed: col.failed, Stale: col.stale}
	excluded := col.aborted + col.failed + col.stale
	if col.rollouts == 0 || len(col.batch) == 0 || float64(excluded)/float64(col.rollouts) > in.MaxFailedShare {
		return rec, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"PPO step %d: %d of %d rollouts left out (aborted %d, failed %d, stale %d), more than max_failed_share %.2f: not training on a partial batch",
			in.Step, excluded, col.rollouts, col.aborted, col.failed, col.stale, in.MaxFailedShare), errs.PartialBatch, nil)
	}
	rec.RewardMean = col.reward / float64(len(col.batch))
	rec.MeanTurns = col.turns / float64(len(col.batch))
	gctx := gpuActivityCtx(ctx, fmt.Sprintf("ppo_step %d on %d trajectories", in.Step, len(col.batch)))
	err = workflow.ExecuteActivity(gctx, gact.TrainerPPOStep, gpu.TrainInput{
		Key: fmt.Sprintf("%sppo/%d", in.KeyPrefix, in.Step), Trajectories: col.batch, Preset: in.Preset, Hyper: in.Hyper,
	}).Get(ctx, &rec.Metrics)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("trained on %d of %d rollouts, reward %.3f", rec.Trained, rec.Rollouts, rec.RewardMean))
	return rec, err
}

// WarmupInput is the critic warm-up: rollouts of the frozen initial policy, then critic_fit.
type WarmupInput struct {
	Campaign    string               `json:"campaign"`
	KeyPrefix   string               `json:"key_prefix"` // trainer keys: <prefix>critic/<round>
	Tasks       []task.Ref           `json:"tasks"`
	Agent       activities.AgentSpec `json:"agent"`
	TurnCap     int                  `json:"turn_cap"`
	S           int                  `json:"s"`
	Concurrency int                  `json:"concurrency"`
	Epochs      int                  `json:"epochs"`
	FitEpochs   int                  `json:"fit_epochs"`
	Gate        float64              `json:"gate"`
	MaxRounds   int                  `json:"max_rounds"`
	Preset      string               `json:"preset"`
	Version     string               `json:"version"`
}

// WarmupResult records cold and warm explained variance.
type WarmupResult struct {
	ColdEV  *float64 `json:"cold_ev,omitempty"`
	WarmEV  *float64 `json:"warm_ev,omitempty"`
	Rounds  int      `json:"rounds"`
	Aborted int      `json:"aborted"`
	Failed  int      `json:"failed"`
	Stale   int      `json:"stale"`
}

// CriticWarmupWorkflow fits the critic on rollouts of the frozen policy until
// its explained variance reaches the gate; PPO starts only after that.
func CriticWarmupWorkflow(ctx workflow.Context, in WarmupInput) (WarmupResult, error) {
	var res WarmupResult
	running := 0
	gctx := gpuActivityCtx(ctx, "")
	for round := 1; round <= max(in.MaxRounds, 1); round++ {
		res.Rounds = round
		var batch []gpu.TrajectoryRef
		for e := 0; e < max(in.Epochs, 1); e++ {
			col, err := collect(ctx, in.Campaign, "warmup", (round-1)*max(in.Epochs, 1)+e, in.Tasks, in.Agent, in.TurnCap, in.S, in.Concurrency, in.Version, &running)
			if err != nil {
				return res, err
			}
			res.Aborted, res.Failed, res.Stale = res.Aborted+col.aborted, res.Failed+col.failed, res.Stale+col.stale
			batch = append(batch, col.batch...)
		}
		if len(batch) == 0 {
			return res, temporal.NewNonRetryableApplicationError("critic warm-up: no usable rollout", errs.PartialBatch, nil)
		}
		var m gpu.Metrics
		if err := workflow.ExecuteActivity(gctx, gact.TrainerCriticFit, gpu.TrainInput{
			Key: fmt.Sprintf("%scritic/%d", in.KeyPrefix, round), Trajectories: batch, Preset: in.Preset, Hyper: map[string]any{"epochs": in.FitEpochs},
		}).Get(ctx, &m); err != nil {
			return res, err
		}
		if v, ok := m.Float("explained_variance_before"); ok && res.ColdEV == nil {
			res.ColdEV = &v
		}
		v, ok := m.Float("explained_variance")
		if ok {
			res.WarmEV = &v
		}
		// Undefined EV (all returns equal) leaves nothing to explain: the gate passes.
		if !ok || v >= in.Gate {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("gate passed after %d round(s)", round))
			return res, nil
		}
	}
	return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("critic warm-up: explained variance %.3f below the gate %.3f after %d rounds",
		deref(res.WarmEV), in.Gate, res.Rounds), errs.WarmupGate, nil)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
