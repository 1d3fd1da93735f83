// Package activities holds every side effect of t1flow: Docker sandboxes,
// verification, the artifact store and the reaper.
package activities

import (
	"fmt"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// Error types, as the architecture's table names them (see internal/errs).
const (
	ErrInfra          = errs.Infra
	ErrRoutingMissing = errs.RoutingMissing
	ErrVerifier       = errs.Verifier
	ErrTaskInvalid    = errs.TaskInvalid
	ErrSandboxGone    = errs.SandboxGone
	ErrBadInput       = errs.BadInput
)

// Constructors of the typed errors.
var (
	InfraErrorf    = errs.Infraf
	TaskInvalidf   = errs.TaskInvalidf
	VerifierErrorf = errs.Verifierf
	SandboxGonef   = errs.SandboxGonef
	BadInputf      = errs.BadInputf
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
)

// AgentSpec says who drives the sandbox.
type AgentSpec struct {
	Kind     string   `json:"kind"`
	Commands []string `json:"commands,omitempty"`
}

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
	default:
		return fmt.Errorf("agent %q: unknown kind (use oracle, nop or scripted)", a.Kind)
	}
}

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
}

// PreviewBytes caps the output a turn puts into workflow history; the capped
// output itself goes to the artifact store when longer.
const PreviewBytes = 512

// TurnResult is what one turn did. Done means the agent had nothing to run.
type TurnResult struct {
	Turn         int        `json:"turn"`
	Done         bool       `json:"done,omitempty"`
	Final        bool       `json:"final,omitempty"` // the agent has nothing after this turn
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
	ExitCode   int         `json:"exit_code"`
	DurationMs int64       `json:"duration_ms"`
	Preview    string      `json:"preview,omitempty"`
}

// DestroyInput removes a sandbox.
type DestroyInput struct {
	Sandbox Sandbox `json:"sandbox"`
}

// ReapInput bounds what the reaper removes.
type ReapInput struct {
	TTLSec float64 `json:"ttl_sec"`
}

// ReapResult lists removed containers.
type ReapResult struct {
	Removed []string `json:"removed"`
	Kept    int      `json:"kept"`
}

// StoreJSONInput writes a small JSON document to the artifact store.
type StoreJSONInput struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}
