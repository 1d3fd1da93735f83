// Package activities holds t1flow's Temporal activities: sandbox turns,
// verification and the reaper (thin methods over the sandbox package),
// episodes, store writes, synthesis and audit steps.
package activities

import (
	"fmt"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/sandbox"
)

// Sandbox identifies one container and the host queue that owns it.
type Sandbox struct {
	ContainerID string `json:"container_id"`
	Name        string `json:"name"`
	Host        string `json:"host"`
	HostQueue   string `json:"host_queue"`
}

// CreateSandboxInput asks for a container for one rollout's sandbox attempt.
type CreateSandboxInput struct {
	Task       task.Ref `json:"task"`
	RolloutID  string   `json:"rollout_id"`
	WorkflowID string   `json:"workflow_id"`
	CampaignID string   `json:"campaign_id"`
	// SandboxAttempt makes the container name unique per fresh sandbox, and the
	// same across retries of one creation, so a retry adopts its container.
	SandboxAttempt int `json:"sandbox_attempt"`
}

// CreateSandboxResult carries the sandbox and the task's timeouts.
type CreateSandboxResult struct {
	Sandbox            Sandbox `json:"sandbox"`
	Image              string  `json:"image"`
	ImageBuilt         bool    `json:"image_built"`
	AgentTimeoutSec    float64 `json:"agent_timeout_sec"`
	VerifierTimeoutSec float64 `json:"verifier_timeout_sec"`
}

// Agent kinds that plug into the turn loop.
const (
	AgentOracle   = "oracle"   // runs solution/solve.sh
	AgentNop      = "nop"      // does nothing
	AgentScripted = "scripted" // runs a given list of commands, one per turn
	AgentPolicy   = "policy"   // a model behind SGLang's native API, token in and out (training and eval)
	AgentChat     = "chat"     // a hosted model behind an OpenAI-compatible chat API (eval only)
)

// AgentSpec says who drives the sandbox.
type AgentSpec struct {
	Kind     string   `json:"kind"`
	Commands []string `json:"commands,omitempty"`
	// policy: SGLang-compatible replicas; chat: the API's base URL and model.
	Inference []string `json:"inference,omitempty"`
	Endpoint  string   `json:"endpoint,omitempty"`
	Model     string   `json:"model,omitempty"`
	// APIKeyEnv names the environment variable holding the chat API key on the
	// sandbox hosts (the key itself never enters a workflow history).
	APIKeyEnv    string  `json:"api_key_env,omitempty"`
	MaxNewTokens int     `json:"max_new_tokens,omitempty"` // per turn; default 512
	Temperature  float64 `json:"temperature"`              // RL rollouts sample at 1.0
	MaxContext   int     `json:"max_context,omitempty"`    // tokens; 0: the model's context
	// HandoffTokens: on Terminus-2, a policy hands off to a fresh context
	// when fewer tokens than this remain (0: Harbor's default, its
	// proactive_summarization_threshold; negative: never).
	HandoffTokens int `json:"handoff_tokens,omitempty"`
	// MaxRerouted is the share of context positions re-run on a prefix-cache
	// miss that may change experts before the turn aborts; 0: DefaultMaxRerouted.
	MaxRerouted float64 `json:"max_rerouted,omitempty"`
	// Solution replaces solution/solve.sh for the oracle (the audit's mutants).
	Solution string `json:"solution,omitempty"`
	// Harness is what a policy or chat model is told and how its replies are
	// read: harness.Terminus2 (Harbor's terminus-2, docs/harness.md) or
	// harness.Short (t1flow's 4-line prompt, for tiny policies). Empty is
	// Short: specs recorded before the field existed meant it; the campaign
	// config and `starter eval` default to terminus-2.
	Harness string `json:"harness,omitempty"`
}

// Terminus2 is whether the agent runs on Terminus-2's harness.
func (a AgentSpec) Terminus2() bool { return a.Harness == harness.Terminus2 }

// Validate names the field at fault.
func (a AgentSpec) Validate() error {
	switch a.Kind {
	case AgentOracle, AgentNop:
		return nil
	case AgentScripted:
		if len(a.Commands) == 0 {
			return fmt.Errorf("agent scripted: commands is empty (give at least one command)")
		}
		return nil
	case AgentPolicy, AgentChat:
		if a.Harness != "" && a.Harness != harness.Terminus2 && a.Harness != harness.Short {
			return fmt.Errorf("agent %s: harness %q is unknown (use %s or %s)", a.Kind, a.Harness, harness.Terminus2, harness.Short)
		}
	}
	switch a.Kind {
	case AgentPolicy:
		if len(a.Inference) == 0 {
			return fmt.Errorf("agent policy: inference is empty (give the SGLang-compatible server URLs)")
		}
		return nil
	case AgentChat:
		if a.Endpoint == "" || a.Model == "" {
			return fmt.Errorf("agent chat: endpoint and model are required")
		}
		return nil
	default:
		return fmt.Errorf("agent %q: unknown kind (use oracle, nop, scripted, policy or chat)", a.Kind)
	}
}

// ModelDriven reports whether the agent is a model behind the harness.
func (a AgentSpec) ModelDriven() bool { return a.Kind == AgentPolicy || a.Kind == AgentChat }

// NextCommand is what the agent runs at turn, when the workflow can know it
// before the turn (for the UI summary); "" when only the activity knows.
func (a AgentSpec) NextCommand(turn int) string {
	switch a.Kind {
	case AgentOracle:
		if turn == 0 {
			return OracleCommand
		}
	case AgentScripted:
		if turn < len(a.Commands) {
			return a.Commands[turn]
		}
	}
	return ""
}

// OracleCommand runs the reference solution copied to /solution.
const OracleCommand = "bash /solution/solve.sh"

// TurnInput is one turn of the agent loop.
type TurnInput struct {
	Sandbox    Sandbox   `json:"sandbox"`
	Task       task.Ref  `json:"task"`
	Agent      AgentSpec `json:"agent"`
	RolloutID  string    `json:"rollout_id"`
	Turn       int       `json:"turn"`
	TimeoutSec float64   `json:"timeout_sec"`
	// StoreTurn: the whole TurnResult is stored at TurnKey and the result is
	// slim (no preview, no output ref): a long rollout's history stays small.
	StoreTurn bool `json:"store_turn,omitempty"`
}

// PreviewBytes caps the output a turn puts into workflow history; the capped
// output itself goes to the artifact store when longer.
const PreviewBytes = 512

// Why a model-driven episode ended, besides the turn cap and the agent timeout.
const (
	EndTaskComplete     = "task_complete"     // asked twice, as the harness requires
	EndContextExhausted = "context_exhausted" // the next turn would overflow the model's context
	EndStorageLimit     = "storage_limit"     // the sandbox wrote past environment.storage_mb and was stopped
)

// TurnResult is what one turn did. Done means the agent had nothing to run.
type TurnResult struct {
	Turn         int        `json:"turn"`
	Done         bool       `json:"done,omitempty"`
	Final        bool       `json:"final,omitempty"` // the agent has nothing after this turn
	EndReason    string     `json:"end_reason,omitempty"`
	ParseError   string     `json:"parse_error,omitempty"`  // the model's output was not a valid action
	Tokens       int        `json:"tokens,omitempty"`       // generated this turn
	Stitch       string     `json:"stitch,omitempty"`       // how the turn boundary was stitched
	InferenceMs  int64      `json:"inference_ms,omitempty"` // model-driven turns: time in the model
	TerminalMs   int64      `json:"terminal_ms,omitempty"`  // and in the sandbox's terminal
	Command      string     `json:"command,omitempty"`
	ExitCode     int        `json:"exit_code"`
	DurationMs   int64      `json:"duration_ms"`
	TimedOut     bool       `json:"timed_out,omitempty"`
	Preview      string     `json:"preview,omitempty"`
	OutputBytes  int64      `json:"output_bytes"`
	DroppedBytes int64      `json:"dropped_bytes,omitempty"`
	Output       *store.Ref `json:"output,omitempty"`
}

// VerifyInput runs the held-out verifier.
type VerifyInput struct {
	Sandbox    Sandbox  `json:"sandbox"`
	Task       task.Ref `json:"task"`
	RolloutID  string   `json:"rollout_id"`
	TimeoutSec float64  `json:"timeout_sec"`
}

// Assertion statuses.
const (
	StatusPassed  = "passed"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// Assertion is one verifier check.
type Assertion struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// VerifyResult is the verifier's per-assertion outcome.
type VerifyResult struct {
	Format     string      `json:"format"` // ctrf, junit, reward.json, reward.txt
	Assertions []Assertion `json:"assertions"`
	Passed     int         `json:"passed"`
	Total      int         `json:"total"`
	// Reward is Harbor's (RewardFile: reward.json or reward.txt), nil when
	// test.sh wrote neither; Resolved is Harbor's success (reward 1, every
	// named reward 1 when there are several without a "reward"), or
	// every assertion passed or skipped when there is no reward file.
	// Disagreement says how the reward file and the assertions differ.
	// Rewards is the reward file's every value as Harbor's
	// verifier_result.rewards ({"reward": x} for reward.txt); Reward is its
	// "reward", else its only value, nil for several without a "reward".
	Rewards      map[string]float64 `json:"rewards,omitempty"`
	Reward       *float64           `json:"reward,omitempty"`
	RewardFile   string             `json:"reward_file,omitempty"`
	Resolved     bool               `json:"resolved"`
	Disagreement string             `json:"disagreement,omitempty"`
	ExitCode     int                `json:"exit_code"`
	DurationMs   int64              `json:"duration_ms"`
	Preview      string             `json:"preview,omitempty"`
	// Tampered lists what the agent changed that verification depends on
	// (docs/verification.md); when set, the tests did not run and the
	// rollout is `tampered`, reward 0.
	Tampered []sandbox.TamperFinding `json:"tampered,omitempty"`
	// StorageLimit: the sandbox was stopped for writing past storage_mb
	// (and restarted for verification).
	StorageLimit bool `json:"storage_limit,omitempty"`
	// DroppedEnv are image or verifier.env variables the sealed verifier
	// left out (they could redirect its shell, interpreter or loader).
	DroppedEnv []string `json:"dropped_env,omitempty"`
	// LiveService is how many sockets the agent's processes served when
	// verification began; when not 0 they kept running, and the tests ran
	// beside them in a verifier container of their own (docs/verification.md,
	// "A service the solution started").
	LiveService int `json:"live_service,omitempty"`
	// LiveRefused says why a sandbox whose agent's processes served, or may
	// have served, a socket was verified kill-first all the same (its
	// writable layer too large to snapshot, or the survey of its sockets
	// never answered: no room under its pids limit).
	LiveRefused string `json:"live_refused,omitempty"`
	// Artifacts are task.toml's artifacts and /logs/artifacts, each a tar in
	// the artifact store.
	Artifacts []CollectedArtifact `json:"artifacts,omitempty"`
}

// CollectedArtifact is one artifacts entry copied out of the sandbox after
// verification: a claim check on its tar, or why there is none.
type CollectedArtifact struct {
	Source      string     `json:"source"`
	Destination string     `json:"destination"`
	Ref         *store.Ref `json:"ref,omitempty"`
	Missing     string     `json:"missing,omitempty"`
}

// DestroyInput removes a sandbox.
type DestroyInput struct {
	Sandbox   Sandbox `json:"sandbox"`
	RolloutID string  `json:"rollout_id,omitempty"`
}

// FinishEpisodeInput asks the sandbox host to assemble a model-driven episode.
type FinishEpisodeInput struct {
	Sandbox   Sandbox   `json:"sandbox"`
	Task      task.Ref  `json:"task"`
	RolloutID string    `json:"rollout_id"`
	Agent     AgentSpec `json:"agent"`
}

// DriftReport is the TITO audit of one trajectory (harness.AuditDrift).
type DriftReport = harness.DriftReport

// RoutingReport is the R3 capture check of one trajectory.
type RoutingReport struct {
	Positions int `json:"positions"`
	// Covered counts the positions with routing: Positions − 1 when valid
	// (the last sampled token has none, as SGLang and vLLM return it).
	Covered int `json:"covered"`
	// Layers are the MoE layers only (config.json says which).
	Layers  int  `json:"layers"`
	TopK    int  `json:"top_k"`
	Experts int  `json:"experts"`
	Valid   bool `json:"valid"`
	// Recomputed: held positions the sampler re-ran on a prefix-cache miss;
	// Rerouted: those whose experts changed (routing drift; R3 inexact there).
	Recomputed int `json:"recomputed,omitempty"`
	Rerouted   int `json:"rerouted,omitempty"`
}

// EpisodeResult is the trajectory's claim check and its reports.
type EpisodeResult struct {
	Trajectory *store.Ref `json:"trajectory,omitempty"` // policy agents only
	// Segments are the trajectories of the contexts after the first: each
	// Terminus-2 handoff opens new ones (docs/harness.md). PPO trains each
	// as a sample of its own with the rollout's reward.
	Segments       []store.Ref    `json:"segments,omitempty"`
	Handoffs       int            `json:"handoffs,omitempty"`
	Turns          int            `json:"turns"`
	Tokens         int            `json:"tokens"`
	LossTokens     int            `json:"loss_tokens"`
	StitchCases    map[string]int `json:"stitch_cases,omitempty"`
	Drift          DriftReport    `json:"drift"`
	Routing        RoutingReport  `json:"routing"`
	PolicyVersions []string       `json:"policy_versions,omitempty"`
	ParseErrors    int            `json:"parse_errors"`
}

// ReapInput bounds what the reaper removes.
type ReapInput struct {
	TTLSec float64 `json:"ttl_sec"`
}

// ReapResult lists removed containers.
type ReapResult struct {
	Removed []string `json:"removed"`
	Kept    int      `json:"kept"`
	// Cancelled: running rollouts whose parent closed without cancelling
	// them (terminated, timed out), asked to cancel; their sandboxes go
	// with them.
	Cancelled []string `json:"cancelled,omitempty"`
	// Retired: no worker took the reap and the host was gone for good, so
	// its reaper schedule was deleted (RetireIdleHost says why).
	Retired string `json:"retired,omitempty"`
}

// StoreJSONInput writes a small JSON document to the artifact store.
type StoreJSONInput struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// StoreEventsInput writes one TensorBoard event file (internal/tfevents) to
// the artifact store: Scalars at each step, stamped with WallTime (Unix
// seconds, the workflow's clock).
type StoreEventsInput struct {
	Key      string                       `json:"key"`
	WallTime float64                      `json:"wall_time"`
	Steps    map[int64]map[string]float64 `json:"steps"`
}
