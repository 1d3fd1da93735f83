package workflows

import (
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// A stage that fails (the init, an eval, SFT, the critic warm-up's gate, a
// PPO step's partial batch or exhausted trainer retries) pauses the campaign
// with the reason in its status, current details and the Outcome search
// attribute ("paused:<error type>"); an operator decides with the retry and
// skip updates (resume is retry here), or cancels the workflow.

// Update names of the operator's decision on a failed stage.
const (
	UpdateRetry = "retry"
	UpdateSkip  = "skip"
)

const (
	decideRetry = "retry"
	decideSkip  = "skip"
)

// StageFailure is the failed stage a campaign is paused on.
type StageFailure struct {
	Stage  string `json:"stage"`  // init, resume, eval-<label>, sft, warmup, ppo-<step>
	Type   string `json:"type"`   // the error type: WarmupGate, PartialBatch, InfraError, TrainerBusy, ...
	Reason string `json:"reason"` // the error, on one line
}

// stage runs one stage of the campaign. When it fails, the campaign pauses
// until an operator decides: retry runs it again (attempt = retries so far),
// skip goes on without it (skipped is true), a cancel ends the campaign.
func (c *campaignRun) stage(ctx workflow.Context, name string, run func(attempt int) error) (skipped bool, err error) {
	for {
		err := run(c.st.Retries[name])
		if err == nil || !pausable(ctx, err) {
			return false, err
		}
		if workflow.GetVersion(ctx, "pause-on-failure", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return false, err // histories from before a failure paused
		}
		collapsed := errorType(err) == errs.RewardCollapse
		d, err := c.awaitDecision(ctx, name, err)
		if err != nil {
			return false, err
		}
		if d == decideSkip {
			c.st.Skipped = append(c.st.Skipped, name)
			return true, nil
		}
		if c.st.Retries == nil {
			c.st.Retries = map[string]int{}
		}
		c.st.Retries[name]++
		if collapsed && !slices.Contains(c.st.FloorWaived, name) {
			c.st.FloorWaived = append(c.st.FloorWaived, name) // an operator looked
		}
	}
}

// pausable is a failure an operator can decide on: not a cancellation of the
// campaign, not its continue-as-new.
func pausable(ctx workflow.Context, err error) bool {
	if ctx.Err() != nil || temporal.IsCanceledError(err) || workflow.IsContinueAsNewError(err) {
		return false
	}
	var can *workflow.ContinueAsNewError
	return !errors.As(err, &can)
}

func (c *campaignRun) awaitDecision(ctx workflow.Context, name string, err error) (string, error) {
	typ := errorType(err)
	if typ == "" {
		typ = "Error"
	}
	c.st.Failure = &StageFailure{Stage: name, Type: typ, Reason: oneLine(err)}
	c.st.Paused, c.decision = true, ""
	workflow.GetLogger(ctx).Warn("campaign paused: a stage failed", "stage", name, "error", err)
	c.details(ctx)
	workflow.UpsertTypedSearchAttributes(ctx, ids.Outcome.ValueSet("paused:"+typ))
	if err := workflow.Await(ctx, func() bool { return c.decision != "" }); err != nil {
		return "", err
	}
	d := c.decision
	c.st.Failure, c.st.Paused, c.decision = nil, false, ""
	workflow.UpsertTypedSearchAttributes(ctx, ids.Outcome.ValueUnset())
	c.details(ctx)
	return d, nil
}

// decide is the retry and skip updates (and resume, which retries a failed
// stage); the validator refuses them unless a failed stage waits.
func (c *campaignRun) decide(d string) (func(workflow.Context) (CampaignStatus, error), func(workflow.Context) error) {
	handler := func(ctx workflow.Context) (CampaignStatus, error) {
		c.decision = d
		return c.status(), nil
	}
	validator := func(ctx workflow.Context) error {
		f := c.st.Failure
		if f == nil {
			return fmt.Errorf("campaign %s: no failed stage waits for a decision (retry and skip decide on a paused failure)", c.cfg.Name)
		}
		if d == decideSkip && (f.Stage == "init" || f.Stage == "resume") {
			return fmt.Errorf("campaign %s: its %s cannot be skipped (it would train on whatever weights the trainer holds): retry or cancel", c.cfg.Name, f.Stage)
		}
		return nil
	}
	return handler, validator
}

func (c *campaignRun) setDecisionHandlers(ctx workflow.Context) error {
	for _, d := range []string{decideRetry, decideSkip} {
		h, v := c.decide(d)
		if err := workflow.SetUpdateHandlerWithOptions(ctx, d, h, workflow.UpdateHandlerOptions{Validator: v}); err != nil {
			return err
		}
	}
	return nil
}
