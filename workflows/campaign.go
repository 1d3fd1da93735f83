package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

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
	WarmCeiling   *float64         `json:"warm_ceiling_ev,omitempty"` // the answer-prefix ceiling of WarmEV's round
	WarmupGate    string           `json:"warmup_gate,omitempty"`     // how the warm-up gate was decided
	Steps         []StepRecord     `json:"steps"`
	Evals         []CheckpointEval `json:"evals"`
	Aborted       int              `json:"aborted"`
	Failed        int              `json:"failed"`
	Stale         int              `json:"stale"`
	// Refused: rollouts that would have trained, in batches a step refused
	// (PartialBatch, RewardCollapse): the step trained on none of its batch.
	Refused     int  `json:"refused,omitempty"`
	Paused      bool `json:"paused"`
	Concurrency int  `json:"concurrency"`
	Runs        int  `json:"runs"` // workflow runs so far (continue-as-new)
	// Failure is the failed stage the campaign is paused on, waiting for
	// retry, skip or cancel (campaign_pause.go).
	Failure *StageFailure  `json:"failure,omitempty"`
	Retries map[string]int `json:"retries,omitempty"` // retries of each stage so far
	Skipped []string       `json:"skipped,omitempty"` // stages an operator skipped
	// FloorWaived: PPO steps an operator retried after a RewardCollapse;
	// they train on what they earn (ppo.collapse_share).
	FloorWaived []string `json:"floor_waived,omitempty"`
	// Epoch names this execution of the campaign in trainer keys: a crash
	// resumes it (same keys, each step trained once); starting the campaign
	// again after it failed is a new epoch.
	Epoch string `json:"epoch"`
	// KeyTag starts the trainer keys after a resume that reloaded the
	// trainer ("resume-<run>/"); Resumes records every resume
	// (campaign_resume.go).
	KeyTag  string         `json:"key_tag,omitempty"`
	Resumes []ResumeRecord `json:"resumes,omitempty"`
	// Trainer is the trainer the campaign is pinned to (trainer_pin.go);
	// nil: the shared GPU queue.
	Trainer *gpu.TrainerRef `json:"trainer,omitempty"`
	// Retention is what checkpoints.keep_last deleted (retention.go).
	Retention *Retention `json:"retention,omitempty"`
	// PPOStarted and PPOEnded bound the PPO phase (its steps, their
	// checkpoints and evals), for the trainer's and the rollouts' busy shares.
	PPOStarted time.Time `json:"ppo_started,omitempty"`
	PPOEnded   time.Time `json:"ppo_ended,omitempty"`
	// Carried: rollouts the last PPO step handed on that no step has adopted
	// yet (ppo.oversample, oversample.go); CarriedDropped: rollouts cancelled
	// before they reported to a step that counted them, because a step failed
	// or was sampled again: those carried into or out of it, and what a
	// refused batch (its own or a step's started ahead) left running.
	Carried        []CarriedRollout `json:"carried,omitempty"`
	CarriedDropped int              `json:"carried_dropped,omitempty"`
}

// CampaignInput is the config and, after continue-as-new, the state.
type CampaignInput struct {
	Config campaign.Config `json:"config"`
	State  *CampaignState  `json:"state,omitempty"`
	// Init is the stored checkpoint that the config's policy.init names
	// (the starter resolves it); nil for a random init.
	Init *gpu.Checkpoint `json:"init,omitempty"`
	// Resume: State is a closed run's last state (`campaign resume`), to
	// continue from its last committed checkpoint (campaign_resume.go).
	Resume bool `json:"resume,omitempty"`
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
	Refused       int          `json:"refused,omitempty"` // CampaignState.Refused
	ColdEV        *float64     `json:"cold_ev,omitempty"`
	WarmEV        *float64     `json:"warm_ev,omitempty"`
	WarmCeiling   *float64     `json:"warm_ceiling_ev,omitempty"`
	Recent        []StepRecord `json:"recent"`
	Evals         []string     `json:"evals"`
	// Epoch is in the campaign's checkpoint names: <name>/<epoch>/<label>.
	Epoch      string   `json:"epoch"`
	Checkpoint string   `json:"checkpoint,omitempty"` // the latest checkpoint's name
	Inference  []string `json:"inference"`            // the servers its rollouts sample from
	// Failure is the failed stage it is paused on (retry, skip or cancel decide).
	Failure *StageFailure  `json:"failure,omitempty"`
	Retries map[string]int `json:"retries,omitempty"`
	Skipped []string       `json:"skipped,omitempty"`
	Resumes []ResumeRecord `json:"resumes,omitempty"`
	Trainer string         `json:"trainer,omitempty"` // the trainer it is pinned to
	// Carried: rollouts handed on that the next step has not adopted yet;
	// CarriedDropped: rollouts cancelled before a step counted them
	// (ppo.oversample; CampaignState.CarriedDropped).
	Carried        int `json:"carried,omitempty"`
	CarriedDropped int `json:"carried_dropped,omitempty"`
}

// CampaignResult is the finished campaign and its report.
type CampaignResult struct {
	State  CampaignState `json:"state"`
	Report store.Ref     `json:"report"`
}

type campaignRun struct {
	cfg      campaign.Config
	st       *CampaignState
	init     *gpu.Checkpoint
	resume   bool // this run resumes a closed one: reload its last checkpoint first
	inFlight string
	decision string // an operator's decision on a failed stage: retry or skip
	// batchChild is the PPO step or warm-up running now, if any.
	batchChild workflow.ChildWorkflowFuture
	// ahead is the PPO step started while the previous one trains;
	// collected the step starts (first run IDs) whose collection is done
	// (lookahead.go).
	ahead     *aheadStep
	collected map[string]bool
	// over: this step oversamples (ppo.oversample); carry: the rollouts
	// each step start (first run ID) handed on; stepRun: the step's start
	// awaited now (oversample.go).
	over    bool
	carry   map[string][]CarriedRollout
	stepRun string
}

// CampaignWorkflow runs the T1 recipe as one durable job: base eval, SFT,
// critic warm-up, PPO steps (each a child workflow, each checkpointed and
// loaded into inference), evals, and a report. Pause, resume and concurrency
// changes are updates; status is a query.
func CampaignWorkflow(ctx workflow.Context, in CampaignInput) (CampaignResult, error) {
	return execute(ctx, &campaignRun{cfg: in.Config, st: in.State, init: in.Init, resume: in.Resume && in.State != nil})
}

func (c *campaignRun) setup(ctx workflow.Context) error {
	if c.st == nil {
		c.st = &CampaignState{Phase: PhaseBaseEval, Concurrency: c.cfg.PPO.Concurrency, Steps: []StepRecord{}, Evals: []CheckpointEval{}}
	}
	c.st.Runs++
	if c.st.Epoch == "" {
		c.st.Epoch = workflow.GetInfo(ctx).FirstRunID
		if len(c.st.Epoch) > 8 {
			c.st.Epoch = c.st.Epoch[len(c.st.Epoch)-8:]
		}
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (CampaignStatus, error) { return c.status(), nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryResumeState, c.resumeState); err != nil {
		return err
	}
	c.receiveCollected(ctx)
	if err := workflow.SetUpdateHandler(ctx, UpdatePause, c.setPaused(true)); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, UpdateResume, c.setPaused(false)); err != nil {
		return err
	}
	if err := c.setDecisionHandlers(ctx); err != nil {
		return err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSetConcurrency, c.setConcurrency,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n int) error { return validConcurrency(n) }})
	if err != nil {
		return err
	}
	return workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(c.cfg.Name), ids.Stage.ValueSet(c.st.Phase), ids.Step.ValueSet(int64(c.st.Step)))
}

// setPaused is the pause and resume update: a paused campaign finishes what
// is in flight and starts nothing new.
func (c *campaignRun) setPaused(paused bool) func(workflow.Context) (CampaignStatus, error) {
	return func(ctx workflow.Context) (CampaignStatus, error) {
		if c.st.Failure != nil {
			if paused {
				return c.status(), nil // already paused, on the failure
			}
			c.decision = decideRetry // resume of a failed stage runs it again
			return c.status(), nil
		}
		c.st.Paused = paused
		c.details(ctx)
		return c.status(), nil
	}
}

func (c *campaignRun) status() CampaignStatus {
	s := CampaignStatus{Name: c.cfg.Name, Phase: c.st.Phase, Step: c.st.Step, Steps: c.cfg.PPO.Steps, Paused: c.st.Paused,
		Concurrency: c.st.Concurrency, WeightVersion: c.st.WeightVersion, InFlight: c.inFlight, Aborted: c.st.Aborted,
		Failed: c.st.Failed, Stale: c.st.Stale, Refused: c.st.Refused, ColdEV: c.st.ColdEV, WarmEV: c.st.WarmEV, WarmCeiling: c.st.WarmCeiling, Recent: []StepRecord{}, Evals: []string{},
		Epoch: c.st.Epoch, Inference: c.st.URLs, Failure: c.st.Failure, Retries: c.st.Retries, Skipped: c.st.Skipped, Resumes: c.st.Resumes,
		Carried: len(c.st.Carried), CarriedDropped: c.st.CarriedDropped}
	if c.st.Checkpoint != nil {
		s.Checkpoint = c.st.Checkpoint.Name
	}
	if c.st.Trainer != nil {
		s.Trainer = c.st.Trainer.Name
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
	if f := c.st.Failure; f != nil {
		state += fmt.Sprintf(" (paused: %s failed, %s: %s; retry, skip or cancel)", f.Stage, f.Type, f.Reason)
	} else if c.st.Paused {
		state += " (paused)"
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — step %d/%d, policy %s; aborted %d, failed %d, stale %d; %s",
		state, c.st.Step, c.cfg.PPO.Steps, c.st.WeightVersion, c.st.Aborted, c.st.Failed, c.st.Stale, c.inFlight))
	workflow.UpsertTypedSearchAttributes(ctx, ids.Stage.ValueSet(c.st.Phase), ids.Step.ValueSet(int64(c.st.Step)))
}

func (c *campaignRun) waitUnpaused(ctx workflow.Context) error {
	if c.st.Paused {
		c.details(ctx)
	}
	return workflow.Await(ctx, func() bool { return !c.st.Paused })
}

func (c *campaignRun) run(ctx workflow.Context) (CampaignResult, error) {
	if err := c.connect(ctx); err != nil {
		return CampaignResult{}, err
	}
	c.details(ctx)
	// A continue-as-new ends the phases too, as its error.
	if err := c.phases(ctx); err != nil {
		return CampaignResult{}, err
	}
	c.inFlight = ""
	c.details(ctx)
	out := CampaignResult{State: *c.st}
	err := workflow.ExecuteActivity(c.controlCtx(ctx, "store the campaign report"), act.StoreJSON, activities.StoreJSONInput{
		Key: "campaigns/" + ids.Clean(c.cfg.Name) + "/report.json", Value: CampaignReportData{Config: c.cfg, State: *c.st},
	}).Get(ctx, &out.Report)
	return out, err
}

// connect finds the inference servers the rollouts sample from and, once per
// campaign, loads the trainer's weights into them.
func (c *campaignRun) connect(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, "trainer-queue", workflow.DefaultVersion, 1) == 1 {
		return c.connectPinned(ctx) // trainer_pin.go
	}
	st := c.st
	if len(st.URLs) == 0 {
		if len(c.cfg.Policy.Inference) > 0 {
			st.URLs = c.cfg.Policy.Inference
		} else {
			var info gpu.InferenceInfo
			if err := workflow.ExecuteActivity(gpuActivityCtx(ctx, "find the inference server"), gact.InferenceInfo).Get(ctx, &info); err != nil {
				return err
			}
			st.URLs, st.WeightVersion = info.URLs, info.WeightVersion
		}
	}
	if c.resume && st.Checkpoint != nil {
		c.resume = false
		_, err := c.stage(ctx, "resume", func(int) error { return c.resumeFrom(ctx) })
		return err
	}
	if st.Checkpoint != nil {
		return nil
	}
	if workflow.GetVersion(ctx, "campaign-init", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		// Inference starts from exactly the trainer's weights.
		return c.checkpoint(ctx, "init")
	}
	_, err := c.stage(ctx, "init", func(int) error { return c.loadInit(ctx) })
	return err
}

// phases runs the recipe on from the phase the state is in.
func (c *campaignRun) phases(ctx workflow.Context) error {
	st, cfg := c.st, c.cfg
	if st.Phase == PhaseBaseEval {
		if cfg.Eval.Base {
			if err := c.evalStage(ctx, "base"); err != nil {
				return err
			}
		}
		st.Phase = PhaseSFT
	}
	if st.Phase == PhaseSFT {
		if cfg.SFT.Enabled {
			if err := c.waitUnpaused(ctx); err != nil {
				return err
			}
			if _, err := c.stage(ctx, "sft", func(int) error { return c.sft(ctx) }); err != nil {
				return err
			}
			if err := c.evalStage(ctx, "sft"); err != nil {
				return err
			}
		}
		st.Phase = PhaseWarmup
	}
	if st.Phase == PhaseWarmup {
		if err := c.waitUnpaused(ctx); err != nil {
			return err
		}
		skipped, err := c.stage(ctx, "warmup", func(attempt int) error { return c.warmup(ctx, attempt) })
		if err != nil {
			return err
		}
		if skipped {
			// Whatever the critic reached, inference serves the trainer's weights.
			if err := c.checkpoint(ctx, "warmup"); err != nil {
				return err
			}
		}
		st.Phase = PhasePPO
	}
	if st.Phase == PhasePPO {
		if st.PPOStarted.IsZero() {
			st.PPOStarted = workflow.Now(ctx)
		}
		if err := c.ppo(ctx); err != nil {
			return err
		}
		st.PPOEnded = workflow.Now(ctx)
		st.Phase = PhaseFinal
	}
	if st.Phase == PhaseFinal {
		if cfg.Eval.AtEnd {
			if err := c.evalStage(ctx, "final"); err != nil {
				return err
			}
		}
		st.Phase = PhaseDone
	}
	return nil
}

// ppo runs the remaining PPO steps, with an eval every Eval.Every steps and a
// continue-as-new every PPO.ContinueAsNewEvery (or when Temporal suggests it).
func (c *campaignRun) ppo(ctx workflow.Context) error {
	st, cfg := c.st, c.cfg
	for st.Step < cfg.PPO.Steps {
		if err := c.waitUnpaused(ctx); err != nil {
			return err
		}
		step := st.Step + 1
		skipped, err := c.stage(ctx, fmt.Sprintf("ppo-%d", step), func(int) error { return c.ppoStep(ctx, step) })
		if err != nil {
			return err
		}
		if skipped {
			st.Steps = append(st.Steps, StepRecord{Step: step, Skipped: true, PolicyVersion: st.WeightVersion})
		}
		st.Step = step
		c.details(ctx)
		if cfg.Eval.Every > 0 && step%cfg.Eval.Every == 0 && step < cfg.PPO.Steps {
			if err := c.evalStage(ctx, fmt.Sprintf("step-%04d", step)); err != nil {
				return err
			}
		}
		// Never with a step started ahead in flight: it would be cancelled (lookahead.go).
		if step < cfg.PPO.Steps && c.ahead == nil && (step%cfg.PPO.ContinueAsNewEvery == 0 || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) {
			// Start a fresh history, carrying only references and small values.
			return workflow.NewContinueAsNewError(ctx, CampaignWorkflow, CampaignInput{Config: cfg, State: st})
		}
	}
	return nil
}

// CampaignReportData is the stored campaign report (starter report renders it).
type CampaignReportData struct {
	Config campaign.Config `json:"config"`
	State  CampaignState   `json:"state"`
}
