package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
)

// Resuming a closed campaign (`campaign resume` of a failed, cancelled or
// terminated one): the starter reads the closed run's last state through the
// resume_state query and starts a new run under the same workflow ID with it
// (failure cleared) and Resume set. The epoch stays, so the trainer keys and
// checkpoint names do. The new run first re-takes the trainer's lease and
// makes sure the trainer holds the campaign's weights from its last committed
// checkpoint on, loads that checkpoint into inference, then carries on from
// the saved phase and step.
//
// A step the trainer committed after that checkpoint (the cancel came after
// the trainer's commit, before the campaign recorded the step and saved its
// checkpoint) is in the trainer's journal: its retry replays the recorded
// result without training. So TrainerInit keeps the trainer's state when it
// is still the campaign's own (the lease was not taken by another campaign
// since: nothing else touched the weights), and the replayed step's update
// is in the weights. When it is not (another campaign trained, or the
// trainer's state is gone), the checkpoint is loaded and every trainer key
// from then on is tagged "resume-<run>/": a key committed after the
// checkpoint would replay without its update, so none is reused. Either way
// no step's update is applied twice or silently dropped.

// QueryResumeState answers the campaign's config, state and init: what a
// resumed run starts from. Queried on a closed run (a worker replays it).
const QueryResumeState = "resume_state"

// ResumeRecord is one resume of a closed campaign.
type ResumeRecord struct {
	Run           int    `json:"run"` // the run (State.Runs) that resumed
	Phase         string `json:"phase"`
	Step          int    `json:"step"`       // the last finished PPO step
	Checkpoint    string `json:"checkpoint"` // what inference was loaded with
	WeightVersion string `json:"weight_version"`
	// TrainerVersion is the trainer's version after the resume; Kept says
	// its own state was kept (ahead of the checkpoint when it committed a
	// step the closed run did not record), otherwise the checkpoint was
	// loaded and KeyTag starts the trainer keys from then on.
	TrainerVersion string `json:"trainer_version"`
	Kept           bool   `json:"kept"`
	KeyTag         string `json:"key_tag,omitempty"`
}

func (c *campaignRun) resumeState() (CampaignInput, error) {
	st := *c.st
	return CampaignInput{Config: c.cfg, State: &st, Init: c.init}, nil
}

// resumeFrom reloads the last committed checkpoint: the trainer (keeping its
// own state when it is still the campaign's), then every inference server.
func (c *campaignRun) resumeFrom(ctx workflow.Context) error {
	st := c.st
	ck := *st.Checkpoint
	// The closed run's carried rollouts are gone with it (oversample.go).
	st.CarriedDropped, st.Carried = st.CarriedDropped+len(st.Carried), nil
	c.inFlight = "resume from " + ck.Name
	c.details(ctx)
	var h gpu.Health
	err := workflow.ExecuteActivity(c.gpuCtx(ctx, "resume: "+ck.Name+" into the trainer"), gact.TrainerInit,
		gpu.InitInput{Campaign: c.cfg.Name, Checkpoint: &ck, Resume: true}).Get(ctx, &h)
	if err != nil {
		return c.gone(err)
	}
	rec := ResumeRecord{Run: st.Runs, Phase: st.Phase, Step: st.Step, Checkpoint: ck.Name, WeightVersion: ck.WeightVersion,
		TrainerVersion: fmt.Sprintf("v%d", h.Version), Kept: h.Kept}
	if !h.Kept {
		st.KeyTag = fmt.Sprintf("resume-%d/", st.Runs)
		rec.KeyTag = st.KeyTag
	}
	var version string
	err = workflow.ExecuteActivity(c.gpuCtx(ctx, "resume: "+ck.Name+" into inference"), gact.InferenceLoadAll,
		gpu.LoadInput{Checkpoint: ck, URLs: c.cfg.Policy.Inference}).Get(ctx, &version)
	if err != nil {
		return c.gone(err)
	}
	if version != ck.WeightVersion {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("inference serves %s after loading checkpoint %s (%s)", version, ck.Name, ck.WeightVersion), errs.Infra, nil)
	}
	st.WeightVersion = version
	st.Resumes = append(st.Resumes, rec)
	c.inFlight = ""
	workflow.GetLogger(ctx).Info("campaign resumed", "checkpoint", ck.Name, "phase", st.Phase, "step", st.Step, "kept", h.Kept)
	return nil
}
