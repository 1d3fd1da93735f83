package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/text"
)

// RolloutStatus is what the "status" query answers.
type RolloutStatus struct {
	Phase          string `json:"phase"` // sandbox, agent, verify, done
	SandboxAttempt int    `json:"sandbox_attempt"`
	Turn           int    `json:"turn"`
	Container      string `json:"container,omitempty"`
	Host           string `json:"host,omitempty"`
}

type rollout struct {
	// slim: turns come back slim with a claim check, and the record is
	// assembled from the stored turns (GetVersion rollout-record-claim-check).
	slim   bool
	in     RolloutInput
	id     string
	wid    string
	start  time.Time
	status RolloutStatus
	rec    RolloutRecord
}

// hostNonRetryable are the errors that end a sandbox attempt at once: the
// sandbox is gone (a fresh one is the retry), the task is broken, or routing
// is missing (the episode must start over).
var hostNonRetryable = []string{errs.SandboxGone, errs.TaskInvalid, errs.BadInput, errs.RoutingMissing}

// RolloutWorkflow runs one rollout attempt: a sandbox is acquired and always
// released; the agent runs one activity per turn on the sandbox's host; the
// held-out verifier scores it. Infrastructure failures retry with a fresh
// sandbox; a broken task stops at once; an unsolved task is a normal outcome.
func RolloutWorkflow(ctx workflow.Context, in RolloutInput) (RolloutResult, error) {
	res, err := execute(ctx, &rollout{in: in})
	if in.ReportToParent {
		reportToParent(ctx, in, res, err)
	}
	return res, err
}

// SignalRolloutDone carries a rollout's result to the parent that asked for
// it (RolloutInput.ReportToParent): a parent that continued as new learns of
// its rollouts only this way.
const SignalRolloutDone = "rollout_done"

// reportToParent signals the result, or the failure as a result, to the
// parent's workflow ID (its latest run). A parent gone is only logged: the
// rollout's own outcome stands.
func reportToParent(ctx workflow.Context, in RolloutInput, res RolloutResult, err error) {
	parent := workflow.GetInfo(ctx).ParentWorkflowExecution
	if parent == nil {
		return
	}
	if err != nil {
		res = failedOutcome(in, err)
	}
	if ctx.Err() != nil {
		// Cancelled: still reported, so a parent that did not cancel it
		// (an operator did) does not wait for it forever.
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	if serr := workflow.SignalExternalWorkflow(ctx, parent.ID, "", SignalRolloutDone, res).Get(ctx, nil); serr != nil {
		workflow.GetLogger(ctx).Warn("rollout result not reported to its parent", "parent", parent.ID, "error", serr)
	}
}

func (r *rollout) setup(ctx workflow.Context) error {
	r.in.defaults()
	if err := r.in.validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	r.id = ids.RolloutID(r.in.CampaignID, r.in.Stage, r.in.Step, r.in.Task.ID, r.in.Attempt)
	r.wid = workflow.GetInfo(ctx).WorkflowExecution.ID
	r.start = workflow.Now(ctx)
	r.rec = RolloutRecord{S: r.in.S, Agent: r.in.Agent, Turns: []activities.TurnResult{}, Containers: []string{}}
	r.rec.Result = RolloutResult{
		RolloutID: r.id, WorkflowID: r.wid, TaskID: r.in.Task.ID, Name: r.in.Task.Name,
		Category: r.in.Task.Category, Difficulty: r.in.Task.Difficulty, Attempt: r.in.Attempt,
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (RolloutStatus, error) { return r.status, nil }); err != nil {
		return err
	}
	return workflow.UpsertTypedSearchAttributes(ctx, rolloutSearchAttributes(r.in, r.id)...)
}

func (r *rollout) run(ctx workflow.Context) (RolloutResult, error) {
	r.slim = workflow.GetVersion(ctx, "rollout-record-claim-check", workflow.DefaultVersion, 1) == 1
	res := &r.rec.Result
	for n := 1; n <= r.in.MaxSandboxAttempts; n++ {
		res.SandboxAttempts = n
		err := r.attempt(ctx, n)
		if err == nil {
			break
		}
		if temporal.IsCanceledError(err) || ctx.Err() != nil {
			return *res, err
		}
		if r.failed(ctx, n, err) {
			break
		}
	}
	res.DurationSec = workflow.Now(ctx).Sub(r.start).Seconds()
	r.status.Phase = "done"
	sas := []temporal.SearchAttributeUpdate{ids.Outcome.ValueSet(res.Outcome)}
	if res.Scored {
		sas = append(sas, ids.Reward.ValueSet(res.Reward))
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, sas...); err != nil {
		return *res, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — %d/%d assertions, reward %.3f, %d turns", res.Outcome, res.Passed, res.Total, res.Reward, res.Turns))

	var ref store.Ref
	key := "rollouts/" + ids.Clean(r.id) + "/record.json"
	var f workflow.Future
	if !r.slim {
		f = storeJSON(ctx, "store rollout record", key, r.rec)
	} else {
		rec := r.rec
		rec.Turns = nil
		f = workflow.ExecuteActivity(sweepActivityCtx(ctx, "assemble rollout record"), ActivityBuildRolloutRecord, RolloutRecordInput{
			Key: key, Record: rec, RolloutID: r.id, Sandbox: r.status.Container, Turns: len(r.rec.Turns)})
	}
	if err := f.Get(ctx, &ref); err != nil {
		return *res, err
	}
	res.Record = &ref
	return *res, nil
}

// failed records sandbox attempt n's error and reports whether the rollout
// stops here (a broken task) rather than trying a fresh sandbox.
func (r *rollout) failed(ctx workflow.Context, n int, err error) (stop bool) {
	res := &r.rec.Result
	r.rec.Failures = append(r.rec.Failures, fmt.Sprintf("sandbox %d: %s", n, oneLine(err)))
	res.Error = oneLine(err)
	kind := errorType(err)
	workflow.GetLogger(ctx).Warn("sandbox attempt failed", "attempt", n, "type", kind, "error", err)
	if kind == errs.TurnLost {
		// The sandbox saw a turn the record lacks: the episode starts over.
		res.LostTurns++
	}
	if kind == errs.TaskInvalid || kind == errs.BadInput {
		res.Outcome = OutcomeTaskInvalid
		return true
	}
	if n == r.in.MaxSandboxAttempts {
		res.Outcome = OutcomeInfraError
		if kind == errs.RoutingMissing {
			res.Outcome = OutcomeAborted
		}
	}
	// Reset per-attempt state: a fresh sandbox starts the episode over.
	r.rec.Turns = r.rec.Turns[:0]
	r.rec.Episode = nil
	res.Turns, res.Trajectory, res.PolicyVersions, res.Segments = 0, nil, nil, nil
	return false
}

// attempt runs one sandbox from creation to destruction. A nil error means the
// rollout has its outcome.
func (r *rollout) attempt(ctx workflow.Context, n int) (err error) {
	r.status = RolloutStatus{Phase: "sandbox", SandboxAttempt: n}
	cs, err := r.createSandbox(ctx, n)
	if err != nil {
		return err
	}
	sb := cs.Sandbox
	r.rec.Containers = append(r.rec.Containers, sb.Name)
	r.status.Container, r.status.Host = sb.Name, sb.Host
	// The sandbox is released however this attempt ends, cancellation
	// included; a host found gone is named in the error.
	defer func() {
		r.release(ctx, sb, err)
		err = r.hostGone(err, sb)
	}()
	return r.episode(ctx, cs)
}

// episode runs the agent and the verifier in the attempt's sandbox.
func (r *rollout) episode(ctx workflow.Context, cs activities.CreateSandboxResult) error {
	sb := cs.Sandbox
	r.status.Phase = "agent"
	if err := r.agentPhase(ctx, cs); err != nil {
		return err
	}
	if r.in.Agent.ModelDriven() {
		if err := r.finishEpisode(ctx, sb); err != nil {
			return err
		}
	}
	// Verification: tests enter only now.
	r.status.Phase = "verify"
	return r.verify(ctx, cs)
}

func (r *rollout) createSandbox(ctx workflow.Context, n int) (activities.CreateSandboxResult, error) {
	cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.SandboxQueue,
		StartToCloseTimeout: time.Hour, // may build the task image
		HeartbeatTimeout:    30 * time.Second,
		// On cancellation, wait for the creation to settle: a sandbox it made
		// is then known here and destroyed, or removed by the activity itself.
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, MaximumAttempts: 3,
			NonRetryableErrorTypes: []string{errs.TaskInvalid, errs.BadInput},
		},
		Summary: fmt.Sprintf("sandbox %d for %s", n, r.in.Task.Name),
	})
	var cs activities.CreateSandboxResult
	err := workflow.ExecuteActivity(cctx, act.CreateSandbox, activities.CreateSandboxInput{
		Task: r.in.Task, RolloutID: r.id, WorkflowID: r.wid, CampaignID: r.in.CampaignID, SandboxAttempt: n,
	}).Get(ctx, &cs)
	return cs, err
}

// onHost sends an activity to the worker that owns the sandbox's container,
// waiting HostWaitSec for a host that went away to come back.
func (r *rollout) onHost(ctx workflow.Context, sb activities.Sandbox, o workflow.ActivityOptions) workflow.Context {
	o.TaskQueue = sb.HostQueue
	o.ScheduleToStartTimeout = time.Duration(r.in.HostWaitSec * float64(time.Second))
	return workflow.WithActivityOptions(ctx, o)
}

// release destroys the attempt's sandbox. After a call its host did not take
// within HostWaitSec (cause), the host is gone: waiting as long again for
// the destroy would only delay the fresh sandbox, so from version
// host-gone-skip-destroy on it is left to the reaper (of the host when it
// comes back, or of another host on the same Docker daemon).
func (r *rollout) release(ctx workflow.Context, sb activities.Sandbox, cause error) {
	if scheduleToStartTimeout(cause) && workflow.GetVersion(ctx, "host-gone-skip-destroy", workflow.DefaultVersion, 1) == 1 {
		workflow.GetLogger(ctx).Warn("sandbox host gone; the reaper will remove the sandbox", "container", sb.Name, "host", sb.Host)
		r.rec.Failures = append(r.rec.Failures, fmt.Sprintf("destroy %s: skipped, host %s is gone (the reaper removes it)", sb.Name, sb.Host))
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = r.onHost(dctx, sb, workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		// A destroy its host took and then died with is retried (and then
		// found gone) after 15 s, not at the 2 minutes.
		HeartbeatTimeout: 15 * time.Second,
		RetryPolicy:      &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:          "destroy " + sb.Name,
	})
	if err := workflow.ExecuteActivity(dctx, act.DestroySandbox, activities.DestroyInput{Sandbox: sb, RolloutID: r.id}).Get(dctx, nil); err != nil {
		// The reaper removes it once this workflow closes.
		workflow.GetLogger(ctx).Warn("sandbox not destroyed; the reaper will remove it", "container", sb.Name, "error", err)
		r.rec.Failures = append(r.rec.Failures, "destroy "+sb.Name+": "+oneLine(err))
	}
}

// hostGone names the host when no worker of it took a call within
// HostWaitSec: the rollout goes on in a fresh sandbox on any host.
func (r *rollout) hostGone(err error, sb activities.Sandbox) error {
	if !scheduleToStartTimeout(err) {
		return err
	}
	return temporal.NewApplicationErrorWithCause(fmt.Sprintf("sandbox host %s took no call on %s within %s: the host is gone; "+
		"the rollout starts over in a fresh sandbox on another host", sb.Host, sb.HostQueue,
		time.Duration(r.in.HostWaitSec*float64(time.Second))), errs.Infra, err)
}

// agentPhase runs turns until the agent ends, the turn cap or the agent's
// deadline; res.AgentEnd says which.
func (r *rollout) agentPhase(ctx workflow.Context, cs activities.CreateSandboxResult) error {
	res := &r.rec.Result
	agentTimeout := cs.AgentTimeoutSec
	if r.in.AgentTimeoutSec > 0 {
		agentTimeout = r.in.AgentTimeoutSec
	}
	deadline := workflow.Now(ctx).Add(time.Duration(agentTimeout * float64(time.Second)))
	res.AgentEnd = AgentEndTurnCap
	for turn := 0; turn < r.in.TurnCap; turn++ {
		remaining := deadline.Sub(workflow.Now(ctx))
		if remaining <= 0 {
			res.AgentEnd = AgentEndTimeout
			return nil
		}
		limit := min(time.Duration(r.in.TurnTimeoutSec*float64(time.Second)), remaining)
		tr, err := r.turn(ctx, cs.Sandbox, turn, limit)
		if err != nil {
			return err
		}
		if tr.Done {
			res.AgentEnd = AgentEndCompleted
			switch tr.EndReason {
			case activities.EndContextExhausted:
				res.AgentEnd = AgentEndContextExhausted // a normal end, still verified
			case activities.EndStorageLimit:
				res.AgentEnd = AgentEndStorageLimit
			}
			return nil
		}
		r.rec.Turns = append(r.rec.Turns, tr)
		res.Turns = len(r.rec.Turns)
		if tr.EndReason == activities.EndStorageLimit {
			res.AgentEnd = AgentEndStorageLimit // stopped mid-turn; still verified
			return nil
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("turn %d: `%s` → exit %d in %d ms", turn, text.Truncate(tr.Command, 80), tr.ExitCode, tr.DurationMs))
		if tr.TimedOut && limit >= remaining {
			res.AgentEnd = AgentEndTimeout
			return nil
		}
		if tr.Final {
			res.AgentEnd = AgentEndCompleted
			return nil
		}
	}
	return nil
}

func (r *rollout) turn(ctx workflow.Context, sb activities.Sandbox, turn int, limit time.Duration) (activities.TurnResult, error) {
	r.status.Turn = turn
	summary := fmt.Sprintf("turn %d", turn)
	if c := r.in.Agent.NextCommand(turn); c != "" {
		summary += ": " + text.Truncate(c, 120)
	}
	tctx := r.onHost(ctx, sb, workflow.ActivityOptions{
		StartToCloseTimeout: limit + time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5, NonRetryableErrorTypes: hostNonRetryable},
		Summary:             summary,
	})
	var tr activities.TurnResult
	err := workflow.ExecuteActivity(tctx, act.AgentTurn, activities.TurnInput{
		Sandbox: sb, Task: r.in.Task, Agent: r.in.Agent, RolloutID: r.id, Turn: turn, TimeoutSec: limit.Seconds(), StoreTurn: r.slim,
	}).Get(ctx, &tr)
	return tr, err
}

// finishEpisode assembles the trajectory where the episode lived; missing
// routing surfaces here too and sends the rollout to a fresh sandbox.
func (r *rollout) finishEpisode(ctx workflow.Context, sb activities.Sandbox) error {
	fctx := r.onHost(ctx, sb, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		// A host killed mid-call is noticed in 30 s, not at the 10 minutes.
		HeartbeatTimeout: 30 * time.Second,
		RetryPolicy:      &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5, NonRetryableErrorTypes: hostNonRetryable},
		Summary:          "trajectory of " + r.in.Task.Name,
	})
	var er activities.EpisodeResult
	if err := workflow.ExecuteActivity(fctx, act.FinishEpisode, activities.FinishEpisodeInput{
		Sandbox: sb, Task: r.in.Task, RolloutID: r.id, Agent: r.in.Agent,
	}).Get(ctx, &er); err != nil {
		return err
	}
	r.rec.Episode = &er
	r.rec.Result.Trajectory, r.rec.Result.PolicyVersions, r.rec.Result.Segments = er.Trajectory, er.PolicyVersions, er.Segments
	r.rec.Result.Rerouted = er.Routing.Rerouted
	return nil
}

func (r *rollout) verify(ctx workflow.Context, cs activities.CreateSandboxResult) error {
	res := &r.rec.Result
	vctx := r.onHost(ctx, cs.Sandbox, workflow.ActivityOptions{
		StartToCloseTimeout: time.Duration(cs.VerifierTimeoutSec*float64(time.Second)) + 2*time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3, NonRetryableErrorTypes: hostNonRetryable},
		Summary:             "verify " + r.in.Task.Name,
	})
	var vr activities.VerifyResult
	err := workflow.ExecuteActivity(vctx, act.Verify, activities.VerifyInput{
		Sandbox: cs.Sandbox, Task: r.in.Task, RolloutID: r.id, TimeoutSec: cs.VerifierTimeoutSec,
	}).Get(ctx, &vr)
	if errorType(err) == errs.Verifier {
		if workflow.GetVersion(ctx, "verifier-error-scored", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			res.Outcome, res.Error = OutcomeVerifierError, oneLine(err) // recorded, unscored
			return nil
		}
		if !lastFailedAs(err, errs.Verifier) {
			// Its host lost: a fresh sandbox, named for what it is.
			return temporal.NewApplicationErrorWithCause("verify in "+cs.Sandbox.Name+": the last try timed out", errs.Infra, err)
		}
		// Retried already in the agent's sandbox, whose state can make the
		// tests hang or write nothing: scored at 0, as Harbor grades it.
		res.Scored, res.Passed, res.Total, res.Reward, res.Resolved = true, 0, 0, 0, false
		res.Outcome, res.Error = OutcomeVerifierError, oneLine(err)
		return nil
	}
	if err != nil {
		return err
	}
	r.rec.Verify = &vr
	if vr.StorageLimit {
		res.AgentEnd = AgentEndStorageLimit
	}
	if len(vr.Tampered) > 0 {
		// Scored at 0 with the paths as evidence (the record's verify.tampered).
		res.Scored, res.Passed, res.Total, res.Reward, res.Resolved = true, 0, 0, 0, false
		res.Outcome, res.Error = OutcomeTampered, tamperSummary(vr)
		return nil
	}
	res.Scored, res.Passed, res.Total = true, vr.Passed, vr.Total
	res.Reward = float64(vr.Passed) / float64(r.in.S)
	res.Resolved = vr.Total > 0 && vr.Passed == vr.Total
	if workflow.GetVersion(ctx, "harbor-reward", workflow.DefaultVersion, 1) == 1 {
		// Harbor's reward file decides resolution; skipped tests do not fail
		// a run (activities.ParseResults).
		res.Resolved, res.HarborReward, res.HarborRewards = vr.HarborResolved(), vr.Reward, vr.Rewards
		res.Disagreement = vr.Disagreement
	}
	res.Error = ""
	res.Outcome = OutcomeUnresolved
	if res.Resolved {
		res.Outcome = OutcomeResolved
	}
	return nil
}

// tamperSummary is the one line a tampered rollout's result carries: the
// paths; the record has each finding's reason.
func tamperSummary(vr activities.VerifyResult) string {
	paths := make([]string, 0, len(vr.Tampered))
	for _, f := range vr.Tampered {
		paths = append(paths, f.Kind+" "+f.Path)
	}
	return "tampered: " + text.Truncate(strings.Join(paths, ", "), 300)
}
