package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// StepRecord is one PPO step's outcome.
type StepRecord struct {
	Step          int         `json:"step"`
	Skipped       bool        `json:"skipped,omitempty"` // an operator skipped the failed step: nothing trained
	PolicyVersion string      `json:"policy_version"`    // the version that sampled the step's rollouts
	Metrics       gpu.Metrics `json:"metrics"`
	Rollouts      int         `json:"rollouts"`
	Trained       int         `json:"trained"`
	Aborted       int         `json:"aborted"`
	Failed        int         `json:"failed"`
	Stale         int         `json:"stale"`
	// Rerouted sums the trained trajectories' routing drift (positions
	// re-routed on a prefix-cache miss); RerouteTrajectories counts those with any.
	Rerouted            int     `json:"rerouted"`
	RerouteTrajectories int     `json:"reroute_trajectories"`
	Tampered            int     `json:"tampered"`                  // trained on, at reward 0
	VerifierErrors      int     `json:"verifier_errors,omitempty"` // trained on, at reward 0 (verifier-error-scored)
	RewardMean          float64 `json:"reward_mean"`
	ResolvedRate        float64 `json:"resolved_rate"` // share of the trained rollouts whose every assertion passed
	MeanTurns           float64 `json:"mean_turns"`
	Checkpoint          string  `json:"checkpoint,omitempty"`
	// Retries[k] counts the samples started again k times after an R3 abort
	// (routing missing, the rollout's own sandbox attempts spent) before
	// their outcome counted; RetriesMax is the most any sample took.
	Retries    []int `json:"retries,omitempty"`
	RetriesMax int   `json:"retries_max"`
	// MaxStaleness is the step's ppo.max_staleness; Staleness[k] the trained
	// rollouts sampled k versions behind PolicyVersion (Stale: those left
	// out for being further behind, or of another version).
	MaxStaleness int   `json:"max_staleness,omitempty"`
	Staleness    []int `json:"staleness,omitempty"`
	// Ahead: the step's rollouts started while the previous step trained
	// (ppo.max_staleness > 0); PolicyVersion is then the version that update
	// produced, which the step trained on. CollectSeconds is the collection's
	// time, WaitSeconds what a step started ahead then waited for the
	// previous one to train and load, TrainSeconds the trainer's ppo_step.
	Ahead          bool    `json:"ahead,omitempty"`
	CollectSeconds float64 `json:"collect_seconds,omitempty"`
	WaitSeconds    float64 `json:"wait_seconds,omitempty"`
	TrainSeconds   float64 `json:"train_seconds,omitempty"`
	// Oversampling (ppo.oversample, oversample.go): Carried rollouts were
	// still running when the step had its outcomes and were handed on to
	// the next step; CarriedIn of those handed to this step trained here,
	// CarriedStale were by then too far behind (counted in Stale too).
	// Dropped: samples never started, waiting in an abort backoff when
	// the step ended, or carried into a step that could not hand them on.
	// TurnsTrained and TurnsFinished are histograms ([k]: rollouts of k
	// turns) of the trained and of all finished rollouts of the step.
	Carried         int              `json:"carried,omitempty"`
	CarriedIn       int              `json:"carried_in,omitempty"`
	CarriedStale    int              `json:"carried_stale,omitempty"`
	Dropped         int              `json:"dropped,omitempty"`
	TurnsTrained    []int            `json:"turns_trained,omitempty"`
	TurnsFinished   []int            `json:"turns_finished,omitempty"`
	CarriedRollouts []CarriedRollout `json:"carried_rollouts,omitempty"` // handed on; the campaign keeps them in its state
}

// Aborted rollouts are started again, fresh, until the batch's deadline:
// a flaky replica must not shrink the batch.
const (
	DefaultStepDeadlineMinutes = 120 // ppo.step_deadline_minutes
	abortBackoff               = 10 * time.Second
	abortBackoffMax            = 2 * time.Minute
)

// RolloutBatch is what a PPO step and a critic warm-up roll out and train on:
// the tasks, the sampling policy, and the version a trajectory must have been
// sampled with to be trained on.
type RolloutBatch struct {
	Campaign string `json:"campaign"`
	// KeyPrefix starts the trainer's idempotency keys: <prefix>ppo/<step>, <prefix>critic/<round>.
	KeyPrefix string               `json:"key_prefix"`
	Tasks     []task.Ref           `json:"tasks"`
	Agent     activities.AgentSpec `json:"agent"`
	Version   string               `json:"version"` // the policy version rollouts must be sampled with
	Preset    string               `json:"preset"`
	// Per rollout and across the batch.
	TurnCap     int `json:"turn_cap"`
	S           int `json:"s"`
	Concurrency int `json:"concurrency"`
	// DeadlineMinutes after a collection starts, an aborted rollout is no
	// longer started again and is left out (0: DefaultStepDeadlineMinutes).
	DeadlineMinutes float64 `json:"deadline_minutes,omitempty"`
	// Trainer is the campaign's pinned trainer (trainer_pin.go); nil: the
	// shared GPU queue.
	Trainer *gpu.TrainerRef `json:"trainer,omitempty"`
	// ContinueEvery: the workflow continues as new after starting this many
	// rollouts in one run (0: DefaultContinueEvery); Window is the
	// collection in progress it hands over (batchwindow.go).
	ContinueEvery int          `json:"continue_every,omitempty"`
	Window        *BatchWindow `json:"window,omitempty"`
	// MaxStaleness K: a rollout trains when every segment of it was sampled
	// within K weight versions of Version (ppo.max_staleness); older ones
	// are left out and counted as stale. 0: only Version itself.
	MaxStaleness int `json:"max_staleness,omitempty"`
	// Need: the collection ends once this many rollouts have an outcome,
	// handing on those still running (0: it waits for every one); Carried:
	// rollouts the previous step handed on, adopted as this one's
	// (ppo.oversample, oversample.go).
	Need    int              `json:"need,omitempty"`
	Carried []CarriedRollout `json:"carried,omitempty"`
}

// behind is how many weight versions the oldest segment of a rollout
// sampled with versions lags Version, and whether the rollout may train.
func (b RolloutBatch) behind(versions []string) (int, bool) {
	if b.MaxStaleness == 0 || len(versions) == 0 {
		return 0, len(versions) == 1 && versions[0] == b.Version
	}
	cur, ok := gpu.VersionOf(b.Version)
	if !ok {
		return 0, false
	}
	most := 0
	for _, v := range versions {
		n, ok := gpu.VersionOf(v)
		if !ok || n > cur || cur-n > b.MaxStaleness {
			return cur - n, false
		}
		most = max(most, cur-n)
	}
	return most, true
}

// PPOStepInput is one PPO step: the batch and the step's training settings.
type PPOStepInput struct {
	RolloutBatch
	Step           int            `json:"step"`
	MaxFailedShare float64        `json:"max_failed_share"`
	Hyper          map[string]any `json:"hyper,omitempty"`
	// NotifyParent: once its collection is done the step signals its parent
	// SignalStepCollected with its number, so the campaign can start the
	// next step's rollouts while this one trains (ppo.max_staleness > 0).
	NotifyParent bool `json:"notify_parent,omitempty"`
	// Ahead: the step was started while the previous one trained. Version
	// is the version that update will produce; the step trains only once the
	// campaign has loaded it and signalled SignalTrainOn with the version
	// inference serves (TrainOn, carried across continue-as-new).
	Ahead   bool   `json:"ahead,omitempty"`
	TrainOn string `json:"train_on,omitempty"`
	// Began is when the step's collection began (its first run).
	Began time.Time `json:"began,omitempty"`
	// RewardFloor > 0: a batch whose mean reward is under it is not trained
	// on (RewardCollapse, ppo.collapse_share); FloorOf says what it is a
	// share of.
	RewardFloor float64 `json:"reward_floor,omitempty"`
	FloorOf     string  `json:"floor_of,omitempty"`
}

// collected is a batch of trajectories and the rollouts left out of it. A
// batch too big for one payload is in the store in chunks (a windowed
// collection, batchwindow.go); the counts travel from run to run.
type collected struct {
	batch  []gpu.TrajectoryRef
	chunks []store.Ref
	BatchCounts
	carried []CarriedRollout // still running when Need outcomes were in
}

// BatchCounts are a collection's outcomes so far.
type BatchCounts struct {
	Rollouts     int     `json:"rollouts"`
	Trained      int     `json:"trained"` // in the batch, inline or in a chunk
	Aborted      int     `json:"aborted"`
	Failed       int     `json:"failed"`
	Stale        int     `json:"stale"`
	Rerouted     int     `json:"rerouted"`
	RerouteTrajs int     `json:"reroute_trajectories"`
	Tampered     int     `json:"tampered"` // in the batch, at reward 0: behaviour to train away
	Reward       float64 `json:"reward"`
	Turns        float64 `json:"turns"`
	Resolved     int     `json:"resolved"`
	Retries      []int   `json:"retries,omitempty"` // samples by the retries they took
	// Staleness[k] counts the trained rollouts whose oldest segment was
	// sampled k weight versions behind the batch's (ppo.max_staleness > 0).
	Staleness []int `json:"staleness,omitempty"`
	// VerifierErrors: in the batch at reward 0, test.sh having hung, crashed
	// or written nothing in the agent's sandbox after its retries.
	VerifierErrors int `json:"verifier_errors,omitempty"`
	// Oversampling only (RolloutBatch.Need > 0): see StepRecord.
	CarriedIn     int   `json:"carried_in,omitempty"`
	CarriedStale  int   `json:"carried_stale,omitempty"`
	Dropped       int   `json:"dropped,omitempty"`
	TurnsTrained  []int `json:"turns_trained,omitempty"`
	TurnsFinished []int `json:"turns_finished,omitempty"`
}

// collect runs one rollout per task, at most width at a time, and keeps the
// trajectories sampled by the expected policy version; aborted, failed and
// stale rollouts are counted. cont is the continue-as-new error that hands
// a windowed collection to the workflow's next run.
func collect(ctx workflow.Context, b RolloutBatch, stage string, step int, running, starts *int, width *concurrency,
	cont func(*BatchWindow) error) (collected, error) {
	var out collected
	if !(b.Agent.Temperature > 0) {
		// Greedy rollouts have no sampling distribution for the trainer's ratio.
		return out, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s %s %d: agent.temperature = %v must be > 0 for rollouts that train", b.Campaign, stage, step, b.Agent.Temperature), errs.BadInput, nil)
	}
	// A task drawn twice in one step is two rollouts: attempts 1 and 2.
	attempt := make([]int, len(b.Tasks))
	seen := map[string]int{}
	for i, t := range b.Tasks {
		seen[t.ID]++
		attempt[i] = seen[t.ID]
	}
	// Version 1 starts aborted rollouts again until the deadline; histories
	// before it left them out after the rollout's own sandbox attempts.
	if workflow.GetVersion(ctx, "retry-aborted-rollouts", workflow.DefaultVersion, 1) == 1 {
		// Version 1 continues as new with rollouts in flight; histories
		// before it collected in one run.
		if workflow.GetVersion(ctx, "step-continue-as-new", workflow.DefaultVersion, 1) == 1 {
			return collectWindowed(ctx, b, stage, step, attempt, running, starts, width, cont)
		}
		return collectRetrying(ctx, b, stage, step, attempt, running, width)
	}
	err := slidingWindow(ctx, len(b.Tasks), width, running,
		func(i int) workflow.Future {
			return startRollout(ctx, RolloutInput{CampaignID: b.Campaign, Stage: stage, Step: step, Task: b.Tasks[i], Attempt: attempt[i],
				Agent: b.Agent, TurnCap: b.TurnCap, S: b.S}, fmt.Sprintf("%s %s %d: %s", b.Campaign, stage, step, b.Tasks[i].Name))
		},
		func(i int, f workflow.Future) {
			out.add(rolloutOutcome(ctx, f, RolloutInput{CampaignID: b.Campaign, Stage: stage, Step: step, Task: b.Tasks[i], Attempt: attempt[i]}), b)
		})
	return out, err
}

// collectRetrying is collect with aborted rollouts started again: after a
// growing backoff, as a new rollout (the sample's next attempt number, so a
// re-run finds it) in a fresh sandbox, with the replica list rotated so
// another replica is tried first. Each start takes a slot of the window. A
// sample still aborted when its next start would fall past the deadline is
// left out and counted; a rollout started before the deadline runs to its end.
func collectRetrying(ctx workflow.Context, b RolloutBatch, stage string, step int, attempt []int, running *int, width *concurrency) (collected, error) {
	var out collected
	minutes := b.DeadlineMinutes
	if minutes <= 0 {
		minutes = DefaultStepDeadlineMinutes
	}
	deadline := workflow.Now(ctx).Add(time.Duration(minutes * float64(time.Minute)))
	draws := map[string]int{}
	for _, t := range b.Tasks {
		draws[t.ID]++
	}
	retries := make([]int, len(b.Tasks))
	input := func(i int) RolloutInput {
		agent := b.Agent
		agent.Inference = rotate(b.Agent.Inference, retries[i])
		// Attempts 1..draws are the samples of a task; retry k of a sample is k draws on.
		return RolloutInput{CampaignID: b.Campaign, Stage: stage, Step: step, Task: b.Tasks[i], Attempt: attempt[i] + retries[i]*draws[b.Tasks[i].ID],
			Agent: agent, TurnCap: b.TurnCap, S: b.S}
	}
	ready := make([]int, len(b.Tasks))
	for i := range ready {
		ready[i] = i
	}
	waiting := 0 // samples in their backoff
	sel := workflow.NewSelector(ctx)
	width.watch(ctx, sel)
	for len(ready) > 0 || *running > 0 || waiting > 0 {
		for *running < width.limit() && len(ready) > 0 {
			i := ready[0]
			ready = ready[1:]
			*running++
			rin := input(i)
			summary := fmt.Sprintf("%s %s %d: %s", b.Campaign, stage, step, b.Tasks[i].Name)
			if retries[i] > 0 {
				summary += fmt.Sprintf(" (retry %d after an abort)", retries[i])
			}
			sel.AddFuture(startRollout(ctx, rin, summary), func(f workflow.Future) {
				*running--
				r := rolloutOutcome(ctx, f, rin)
				if r.Outcome == OutcomeAborted {
					wait := min(abortBackoff<<min(retries[i], 16), abortBackoffMax)
					if workflow.Now(ctx).Add(wait).Before(deadline) {
						waiting++
						sel.AddFuture(workflow.NewTimer(ctx, wait), func(workflow.Future) {
							waiting--
							retries[i]++
							ready = append([]int{i}, ready...) // before samples not yet started
						})
						return
					}
				}
				out.add(r, b)
				out.took(retries[i])
			})
		}
		sel.Select(ctx)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

func (c *collected) add(r RolloutResult, b RolloutBatch) {
	c.Rollouts++
	if b.Need > 0 || len(b.Carried) > 0 {
		defer c.countTurns(r, c.Trained)
	}
	behind, fresh := b.behind(r.PolicyVersions)
	switch {
	case r.Outcome == OutcomeAborted:
		c.Aborted++
	case !r.Scored || r.Trajectory == nil:
		c.Failed++
	case !fresh:
		// Sampled by another policy version, or more than max_staleness behind: never trained on.
		c.Stale++
	default:
		if b.MaxStaleness > 0 {
			for len(c.Staleness) <= behind {
				c.Staleness = append(c.Staleness, 0)
			}
			c.Staleness[behind]++
		}
		switch r.Outcome {
		case OutcomeTampered:
			c.Tampered++
		case OutcomeVerifierError:
			c.VerifierErrors++
		}
		for _, t := range append([]store.Ref{*r.Trajectory}, r.Segments...) {
			// A handoff's contexts are samples of their own, each on the context its sampler saw.
			c.batch = append(c.batch, gpu.TrajectoryRef{Trajectory: t, Reward: r.Reward, PolicyVersion: strings.Join(r.PolicyVersions, ","), TaskID: r.TaskID, Temperature: b.Agent.Temperature})
		}
		c.Trained++
		c.Reward += r.Reward
		if r.Resolved {
			c.Resolved++
		}
		c.Rerouted += r.Rerouted
		if r.Rerouted > 0 {
			c.RerouteTrajs++
		}
		c.Turns += float64(r.Turns)
	}
}

type ppoStep struct {
	in    PPOStepInput
	prog  Progress
	width *concurrency
	// stopTrainOn ends the SignalTrainOn receiver of a step started ahead.
	stopTrainOn func(workflow.Context)
}

// PPOStepWorkflow rolls out the step's tasks with bounded concurrency, leaves
// out aborted, failed and stale rollouts (failing loudly when they exceed the
// allowed share), and runs the trainer's ppo_step under the step's
// idempotency key.
func PPOStepWorkflow(ctx workflow.Context, in PPOStepInput) (StepRecord, error) {
	return execute(ctx, &ppoStep{in: in, prog: Progress{Total: len(in.Tasks)}})
}

func (p *ppoStep) setup(ctx workflow.Context) error {
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(p.in.Campaign), ids.Stage.ValueSet("ppo"), ids.Step.ValueSet(int64(p.in.Step)))
	var err error
	if p.width, err = newConcurrency(ctx, p.in.Concurrency, p.status); err != nil {
		return err
	}
	if p.in.Ahead {
		// Kept in the input, so a continue-as-new carries it (stopped first,
		// so a signal of the run's last task is applied); no command.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		p.stopTrainOn = receiveUntilStopped(dctx, SignalTrainOn, func(_ workflow.Context, v string) { p.in.TrainOn = v })
	}
	return workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return p.status(), nil })
}

func (p *ppoStep) status() Progress {
	s := p.prog
	s.Concurrency = p.width.limit()
	return s
}

func (p *ppoStep) run(ctx workflow.Context) (StepRecord, error) {
	in := p.in
	var starts int
	if p.in.Began.IsZero() {
		p.in.Began = workflow.Now(ctx)
	}
	col, err := collect(ctx, in.RolloutBatch, "ppo", in.Step, &p.prog.Running, &starts, p.width, func(w *BatchWindow) error {
		width := p.width.final(ctx)
		if p.stopTrainOn != nil {
			p.stopTrainOn(ctx)
		}
		next := p.in
		next.Window, next.Concurrency = w, width
		return workflow.NewContinueAsNewError(ctx, PPOStepWorkflow, next)
	})
	if err != nil {
		return StepRecord{}, err
	}
	rec := StepRecord{Step: in.Step, PolicyVersion: in.Version, Rollouts: col.Rollouts, Trained: col.Trained, Aborted: col.Aborted, Failed: col.Failed, Stale: col.Stale,
		Rerouted: col.Rerouted, RerouteTrajectories: col.RerouteTrajs, Tampered: col.Tampered, VerifierErrors: col.VerifierErrors, Retries: col.Retries, RetriesMax: max(len(col.Retries)-1, 0),
		MaxStaleness: in.MaxStaleness, Staleness: col.Staleness, Ahead: in.Ahead,
		Carried: len(col.carried), CarriedIn: col.CarriedIn, CarriedStale: col.CarriedStale, Dropped: col.Dropped,
		TurnsTrained: col.TurnsTrained, TurnsFinished: col.TurnsFinished, CarriedRollouts: col.carried}
	rec.CollectSeconds = workflow.Now(ctx).Sub(p.in.Began).Seconds()
	excluded := col.Aborted + col.Failed + col.Stale
	if col.Rollouts == 0 || col.Trained == 0 || float64(excluded)/float64(col.Rollouts) > in.MaxFailedShare {
		aborted := fmt.Sprintf("aborted %d", col.Aborted)
		if col.Retries != nil && col.Aborted > 0 {
			aborted += " still at the step deadline after retries"
		}
		return rec, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"PPO step %d: %d of %d rollouts left out (%s, failed %d, stale %d), more than max_failed_share %.2f: not training on a partial batch",
			in.Step, excluded, col.Rollouts, aborted, col.Failed, col.Stale, in.MaxFailedShare), errs.PartialBatch, nil, col.carried, refused(rec))
	}
	rec.RewardMean = col.Reward / float64(col.Trained)
	if in.RewardFloor > 0 && rec.RewardMean < in.RewardFloor {
		return rec, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"PPO step %d: mean reward %.3f on %d trained rollouts (%d resolved), under the floor %.3f (%s): not training on it, the policy may have collapsed in an earlier update; retry resamples and trains on what it earns, skip goes on without this step",
			in.Step, rec.RewardMean, col.Trained, col.Resolved, in.RewardFloor, in.FloorOf), errs.RewardCollapse, nil, col.carried, refused(rec))
	}
	// A refused batch fails above, before it tells the campaign to start the next
	// step; its error's details are what it would have carried on (dropCarried).
	if err := p.awaitTurn(ctx, &rec); err != nil {
		return rec, err
	}
	rec.ResolvedRate = float64(col.Resolved) / float64(col.Trained)
	rec.MeanTurns = col.Turns / float64(col.Trained)
	gctx := trainerCtx(ctx, in.Trainer, fmt.Sprintf("ppo_step %d on %d trajectories", in.Step, col.Trained))
	trainAt := workflow.Now(ctx)
	err = workflow.ExecuteActivity(gctx, gact.TrainerPPOStep, gpu.TrainInput{
		Key: fmt.Sprintf("%sppo/%d", in.KeyPrefix, in.Step), Trajectories: col.batch, Chunks: col.chunks, Preset: in.Preset, Hyper: in.Hyper,
	}).Get(ctx, &rec.Metrics)
	rec.TrainSeconds = workflow.Now(ctx).Sub(trainAt).Seconds()
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("trained on %d of %d rollouts, reward %.3f, at most %d retries after aborts", rec.Trained, rec.Rollouts, rec.RewardMean, rec.RetriesMax))
	return rec, trainerGone(err, in.Trainer)
}
