package workflows

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
)

// A campaign is pinned to one trainer (gpu/pin.go): its init or resume stage
// claims a trainer on the shared GPU queue and records it in the campaign
// state (Trainer); every later trainer and inference call of the campaign,
// its PPO steps' and warm-up's included, goes to that trainer's own queue.
// When nothing takes a call there within TrainerWait, the trainer's host is
// gone: the call fails with TrainerGone, naming the trainer, and the campaign
// pauses on it. A retry waits for that trainer again (an init stage claims a
// trainer afresh); `campaign resume` after a cancel claims any trainer and
// reloads the last committed checkpoint there.

// TrainerWait is how long a call to a pinned trainer waits for its worker
// (a restart of the GPU worker fits in it).
var TrainerWait = 10 * time.Minute

// trainerCtx is gpuActivityCtx on the pinned trainer's queue (nil: the
// shared queue, as for campaigns from before pinning).
func trainerCtx(ctx workflow.Context, t *gpu.TrainerRef, summary string) workflow.Context {
	actx := gpuActivityCtx(ctx, summary)
	if t == nil || t.Queue == "" {
		return actx
	}
	o := workflow.GetActivityOptions(actx)
	o.TaskQueue, o.ScheduleToStartTimeout = t.Queue, TrainerWait
	return workflow.WithActivityOptions(ctx, o)
}

// trainerGone turns a pinned trainer's schedule-to-start timeout into
// TrainerGone, naming the trainer; other errors pass through.
func trainerGone(err error, t *gpu.TrainerRef) error {
	if t == nil || t.Queue == "" || !scheduleToStartTimeout(err) {
		return err
	}
	return errs.TrainerGonef("trainer %s took no call on its queue %s within %s: its GPU worker or host is gone. "+
		"The campaign is pinned to it (it holds the campaign's weights): retry once it is back, or cancel the campaign and "+
		"`starter campaign resume` it to continue on another trainer from its last checkpoint", t.Name, t.Queue, TrainerWait)
}

// scheduleToStartTimeout: no worker took the activity in time.
func scheduleToStartTimeout(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// gpuCtx and gone are trainerCtx and trainerGone for this campaign's trainer.
func (c *campaignRun) gpuCtx(ctx workflow.Context, summary string) workflow.Context {
	return trainerCtx(ctx, c.st.Trainer, summary)
}

func (c *campaignRun) gone(err error) error { return trainerGone(err, c.st.Trainer) }

// claimTrainer pins the campaign to the trainer that takes TrainerClaim on
// the shared queue (an unnamed trainer leaves it on the shared queue).
func (c *campaignRun) claimTrainer(ctx workflow.Context) error {
	var t gpu.TrainerRef
	if err := workflow.ExecuteActivity(gpuActivityCtx(ctx, "claim a trainer"), gact.TrainerClaim, c.cfg.Name).Get(ctx, &t); err != nil {
		return err
	}
	c.st.Trainer = nil
	if t.Queue != "" {
		c.st.Trainer = &t
	}
	return nil
}

// inferenceURLs finds the inference servers the rollouts sample from: the
// configured ones, or the trainer's local server.
func (c *campaignRun) inferenceURLs(ctx workflow.Context) error {
	if len(c.st.URLs) > 0 {
		return nil
	}
	if len(c.cfg.Policy.Inference) > 0 {
		c.st.URLs = c.cfg.Policy.Inference
		return nil
	}
	var info gpu.InferenceInfo
	if err := workflow.ExecuteActivity(c.gpuCtx(ctx, "find the inference server"), gact.InferenceInfo).Get(ctx, &info); err != nil {
		return c.gone(err)
	}
	c.st.URLs, c.st.WeightVersion = info.URLs, info.WeightVersion
	return nil
}

// connectPinned is connect from version trainer-queue on. A new campaign
// (its init) and a resumed one claim a trainer first, then find inference on
// it; a run continued as new keeps its trainer. A resume forgets the old
// trainer (it may be gone) and the inference it found there.
func (c *campaignRun) connectPinned(ctx workflow.Context) error {
	st := c.st
	name := "init"
	switch {
	case c.resume && st.Checkpoint != nil:
		name, c.resume = "resume", false
		st.Trainer = nil
		if len(c.cfg.Policy.Inference) == 0 {
			st.URLs = nil
		}
	case st.Checkpoint != nil:
		return c.inferenceURLs(ctx) // continued as new: same trainer (or the shared queue, before pinning)
	}
	_, err := c.stage(ctx, name, func(int) error {
		// Every attempt claims: a retry after TrainerGone finds a live trainer.
		if err := c.claimTrainer(ctx); err != nil {
			return err
		}
		if len(c.cfg.Policy.Inference) == 0 {
			st.URLs = nil // the claimed trainer's own server
		}
		if err := c.inferenceURLs(ctx); err != nil {
			return err
		}
		if name == "resume" {
			return c.resumeFrom(ctx)
		}
		return c.loadInit(ctx)
	})
	return err
}
