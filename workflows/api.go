// Package workflows holds t1flow's deterministic workflow code: no I/O, no
// wall-clock time, no randomness outside the SDK's APIs.
package workflows

import (
	"fmt"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// Defaults.
const (
	DefaultS                  = 20  // reward = passing assertions / S, fixed per campaign
	DefaultTurnCap            = 300 // training rollouts
	EvalTurnCap               = 60  // eval sweeps
	DefaultSandboxAttempts    = 3
	DefaultTurnTimeoutSec     = 600
	DefaultHostWaitSec        = 600 // how long to wait for a dead sandbox host to come back
	DefaultEvalConcurrency    = 4
	DefaultReaperTTLSec       = 24 * 3600
	DefaultReaperIntervalSecs = 60
	// DefaultReaperRetireAfterSec: a host with no worker and no completed
	// reap for this long is retired (its reaper schedule deleted).
	DefaultReaperRetireAfterSec = 24 * 3600
)

// HostWait is how long a rollout's call to the sandbox host that owns its
// container waits for a worker of that host (the control worker's
// -host-wait): a worker restart fits in it; past it the host is gone, and the
// rollout starts over in a fresh sandbox on any host (rollout.go).
var HostWait = DefaultHostWaitSec * time.Second

// Rollout outcomes (the Outcome search attribute).
const (
	OutcomeResolved    = "resolved"     // every assertion passed
	OutcomeUnresolved  = "unresolved"   // the agent did not solve it: a normal outcome
	OutcomeInfraError  = "infra_error"  // sandboxes kept failing: not scored
	OutcomeTaskInvalid = "task_invalid" // the task itself is broken: not scored
	OutcomeAborted     = "aborted"      // e.g. routing missing, retries exhausted: not scored
	// OutcomeTampered: the agent changed what verification depends on
	// (docs/verification.md). Scored, at reward 0: behaviour to train away.
	OutcomeTampered = "tampered"
	// OutcomeVerifierError: test.sh timed out, crashed or wrote no results
	// in the agent's sandbox, retries exhausted. Scored, at reward 0: the
	// agent's state can cause it (a fifo the tests read, a tool deleted).
	// Unscored in histories from before GetVersion verifier-error-scored.
	OutcomeVerifierError = "verifier_error"
)

// How the agent phase ended.
const (
	AgentEndCompleted        = "completed"
	AgentEndTurnCap          = "turn_cap"
	AgentEndTimeout          = "agent_timeout"
	AgentEndContextExhausted = activities.EndContextExhausted
	AgentEndStorageLimit     = activities.EndStorageLimit // wrote past storage_mb: stopped, still verified
)

// RolloutInput is one rollout attempt.
type RolloutInput struct {
	CampaignID string               `json:"campaign_id"`
	Stage      string               `json:"stage"`
	Step       int                  `json:"step"`
	Task       task.Ref             `json:"task"`
	Attempt    int                  `json:"attempt"`
	Agent      activities.AgentSpec `json:"agent"`
	TurnCap    int                  `json:"turn_cap,omitempty"`
	S          int                  `json:"s,omitempty"`
	// AgentTimeoutSec overrides task.toml's agent.timeout_sec when > 0.
	AgentTimeoutSec    float64 `json:"agent_timeout_sec,omitempty"`
	TurnTimeoutSec     float64 `json:"turn_timeout_sec,omitempty"`
	MaxSandboxAttempts int     `json:"max_sandbox_attempts,omitempty"`
	HostWaitSec        float64 `json:"host_wait_sec,omitempty"`
	// ReportToParent: the rollout signals its result to its parent's
	// workflow ID (SignalRolloutDone), which reaches the parent's latest run
	// after it continued as new.
	ReportToParent bool `json:"report_to_parent,omitempty"`
}

func (in *RolloutInput) defaults() {
	if in.TurnCap <= 0 {
		in.TurnCap = DefaultTurnCap
	}
	if in.S <= 0 {
		in.S = DefaultS
	}
	if in.TurnTimeoutSec <= 0 {
		in.TurnTimeoutSec = DefaultTurnTimeoutSec
	}
	if in.MaxSandboxAttempts <= 0 {
		in.MaxSandboxAttempts = DefaultSandboxAttempts
	}
	if in.HostWaitSec <= 0 {
		in.HostWaitSec = HostWait.Seconds()
	}
	if in.Stage == "" {
		in.Stage = "eval"
	}
}

func (in RolloutInput) validate() error {
	if in.Task.ID == "" {
		return fmt.Errorf("rollout input: task.id is empty")
	}
	if in.Task.Bundle.URI == "" {
		return fmt.Errorf("rollout input: task.bundle.uri is empty (import the task first)")
	}
	return in.Agent.Validate()
}

// RolloutResult is small on purpose: the full record is an artifact.
type RolloutResult struct {
	RolloutID  string  `json:"rollout_id"`
	WorkflowID string  `json:"workflow_id"`
	TaskID     string  `json:"task_id"`
	Name       string  `json:"name"`
	Category   string  `json:"category,omitempty"`
	Difficulty string  `json:"difficulty,omitempty"`
	Attempt    int     `json:"attempt"`
	Outcome    string  `json:"outcome"`
	AgentEnd   string  `json:"agent_end,omitempty"`
	Scored     bool    `json:"scored"` // false: infra or task failure, aborted; not a reward of 0
	Reward     float64 `json:"reward"`
	Passed     int     `json:"passed"`
	Total      int     `json:"total"`
	Resolved   bool    `json:"resolved"`
	// HarborReward is the task's own reward as Harbor reads it
	// (reward.json, else reward.txt); nil when test.sh wrote neither.
	HarborReward *float64 `json:"harbor_reward,omitempty"`
	// HarborRewards is every value of the reward file, Harbor's
	// verifier_result.rewards; HarborReward is its "reward" or only value
	// (nil for several named ones without a "reward").
	HarborRewards map[string]float64 `json:"harbor_rewards,omitempty"`
	// Disagreement says how the reward file and the tests' own results
	// (CTRF/JUnit) differ on resolution when they do; the reward file
	// decided, as in Harbor (activities.VerifyResult.Disagreement).
	Disagreement    string  `json:"disagreement,omitempty"`
	Turns           int     `json:"turns"`
	DurationSec     float64 `json:"duration_s"`
	SandboxAttempts int     `json:"sandbox_attempts"`
	// LostTurns counts agent turns lost to a worker that died mid-turn: each
	// one started the episode over in a fresh sandbox (errs.TurnLost).
	LostTurns int        `json:"lost_turns,omitempty"`
	Error     string     `json:"error,omitempty"`
	Record    *store.Ref `json:"record,omitempty"`
	// Model-driven rollouts: the trajectory's claim check and the policy
	// version(s) that sampled it.
	Trajectory     *store.Ref `json:"trajectory,omitempty"`
	PolicyVersions []string   `json:"policy_versions,omitempty"`
	// Segments: the trajectories of the contexts after a Terminus-2
	// handoff, each trained as a sample of its own with the rollout's reward.
	Segments []store.Ref `json:"segments,omitempty"`
	// Rerouted: context positions whose experts changed when the sampler
	// re-ran them after a prefix-cache miss (routing drift, under the abort threshold).
	Rerouted int `json:"rerouted,omitempty"`
}

// RolloutRecord is the full account of a rollout, stored as an artifact.
type RolloutRecord struct {
	Result     RolloutResult             `json:"result"`
	Turns      []activities.TurnResult   `json:"turns"`
	Verify     *activities.VerifyResult  `json:"verify,omitempty"`
	Failures   []string                  `json:"failures,omitempty"` // one line per failed sandbox attempt
	S          int                       `json:"s"`
	Agent      activities.AgentSpec      `json:"agent"`
	Containers []string                  `json:"containers"`
	Episode    *activities.EpisodeResult `json:"episode,omitempty"`
}

// EvalSweepInput is tasks × attempts with one agent.
type EvalSweepInput struct {
	SweepID     string               `json:"sweep_id"`
	Tasks       []task.Ref           `json:"tasks"`
	Agent       activities.AgentSpec `json:"agent"`
	Attempts    int                  `json:"attempts"`
	Concurrency int                  `json:"concurrency"`
	TurnCap     int                  `json:"turn_cap,omitempty"`
	S           int                  `json:"s,omitempty"`
	// AgentTimeoutSec overrides each task's agent.timeout_sec when > 0.
	AgentTimeoutSec float64 `json:"agent_timeout_sec,omitempty"`
	// TaskManifest is the claim check of the task list: a stored task.Pool
	// (a pool's own object will do) read a page at a time, so the input
	// stays small whatever the sweep's size. Tasks or TaskManifest, not both.
	TaskManifest *store.Ref `json:"task_manifest,omitempty"`
	// ContinueEvery: the sweep continues as new after starting this many
	// rollouts in one run (or when Temporal suggests it), rollouts in flight.
	// 0: DefaultContinueEvery.
	ContinueEvery int `json:"continue_every,omitempty"`
	// Window is the state a run hands the next (continue-as-new); callers
	// leave it nil.
	Window *SweepWindow `json:"window,omitempty"`
}

// DefaultContinueEvery is how many rollouts an eval sweep starts in one run
// before it continues as new: about 7 history events and 4.3 KB each in the
// sweep's history (~3,700 events, ~2.2 MB a run), far below Temporal's limits.
const DefaultContinueEvery = 500

// SweepWindow is an eval sweep's window carried across continue-as-new.
// Results are in the store (chunks), not here, but for the few that came
// in after the last chunk was written.
type SweepWindow struct {
	Tasks int `json:"tasks"` // tasks in the manifest
	Next  int `json:"next"`  // rollouts started (job index of the next)
	// InFlight: rollout workflow ID -> job index, the rollouts started and
	// not reported yet.
	InFlight map[string]int  `json:"in_flight"`
	Done     int             `json:"done"`
	Resolved int             `json:"resolved"`
	Chunks   int             `json:"chunks"` // result chunks written
	Pending  []RolloutResult `json:"pending,omitempty"`
	Runs     int             `json:"runs"` // runs before this one
}

// Group aggregates rollouts sharing a category or difficulty.
type Group struct {
	Rollouts     int     `json:"rollouts"`
	Scored       int     `json:"scored"`
	Resolved     int     `json:"resolved"`
	ResolvedRate float64 `json:"resolved_rate"` // over every rollout, as Summary's
	MeanReward   float64 `json:"mean_reward"`
}

// Summary aggregates a sweep. The headline ResolvedRate is Harbor's: over
// every rollout, an unscored one (infra or task failure, aborted)
// counted as 0; Unscored says how many those are and ScoredResolvedRate is
// the rate over the scored alone. MeanReward (T1's passing / S) is over the
// scored; HarborMeanReward is Harbor's mean, a missing reward counted as 0.
type Summary struct {
	Rollouts           int     `json:"rollouts"`
	Scored             int     `json:"scored"`
	Unscored           int     `json:"unscored"`
	Resolved           int     `json:"resolved"`
	ResolvedRate       float64 `json:"resolved_rate"`
	ScoredResolvedRate float64 `json:"scored_resolved_rate"`
	HarborMeanReward   float64 `json:"harbor_mean_reward"`
	// PassAtK: pass@k (unbiased estimator) over tasks, for k = 1, 2, 4, ...
	// up to the fewest attempts any task had; unscored attempts count as
	// failures.
	PassAtK       map[string]float64 `json:"pass_at_k,omitempty"`
	MeanReward    float64            `json:"mean_reward"`
	MeanTurns     float64            `json:"mean_turns"`
	MeanDurationS float64            `json:"mean_duration_s"`
	Outcomes      map[string]int     `json:"outcomes"`
	// Tampered counts scored rollouts whose verification was refused for
	// tampering (in Scored, at reward 0).
	Tampered int `json:"tampered"`
	// Disagreements counts scored rollouts whose reward file and tests
	// disagreed on resolution (RolloutResult.Disagreement).
	Disagreements  int              `json:"disagreements,omitempty"`
	AgentEnds      map[string]int   `json:"agent_ends"`
	ByCategory     map[string]Group `json:"by_category"`
	ByDifficulty   map[string]Group `json:"by_difficulty"`
	SandboxRetries int              `json:"sandbox_retries"`
	// PolicyVersions counts model-driven rollouts by the weight version(s)
	// that sampled them ("a+b" when a rollout saw a weight change).
	PolicyVersions map[string]int `json:"policy_versions,omitempty"`
}

// EvalReport is the stored artifact of a sweep.
type EvalReport struct {
	SweepID    string               `json:"sweep_id"`
	WorkflowID string               `json:"workflow_id"`
	Agent      activities.AgentSpec `json:"agent"`
	Attempts   int                  `json:"attempts"`
	S          int                  `json:"s"`
	Summary    Summary              `json:"summary"`
	Rollouts   []RolloutResult      `json:"rollouts"`
}

// EvalSweepResult is the workflow's result: the summary and a claim check on the report.
type EvalSweepResult struct {
	SweepID string    `json:"sweep_id"`
	Summary Summary   `json:"summary"`
	Report  store.Ref `json:"report"`
}

// CheckpointEval is an eval sweep at one checkpoint.
type CheckpointEval struct {
	Label         string    `json:"label"` // base, sft, step-0002, final
	WeightVersion string    `json:"weight_version"`
	Summary       Summary   `json:"summary"`
	Report        store.Ref `json:"report"`
}

// Progress is what the "progress" query of a sweep answers (eval sweep, PPO
// step, synthesis sweep, audit sweep, checkpoint eval): jobs in all, done and
// running, and how many came out well (resolved, accepted or kept).
type Progress struct {
	Total    int `json:"total"`
	Done     int `json:"done"`
	Running  int `json:"running"`
	Resolved int `json:"resolved"`
	// Concurrency is the window's width now (set_concurrency changes it);
	// 0 where it is fixed.
	Concurrency int `json:"concurrency,omitempty"`
}

// Query names.
const (
	QueryStatus   = "status"
	QueryProgress = "progress"
)
