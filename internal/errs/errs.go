// Package errs holds the typed Temporal application errors of the
// architecture's error table, shared by every activity package.
package errs

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
)

// Error types.
const (
	Infra          = "InfraError"     // retried; never scored as reward 0
	RoutingMissing = "RoutingMissing" // R3 routing absent or invalid
	Verifier       = "VerifierError"  // verifier crashed, timed out, wrote no results: retried, then scored 0
	TaskInvalid    = "TaskInvalid"    // the task itself is broken: non-retryable
	// SandboxGone is an InfraError that the same sandbox cannot fix.
	SandboxGone = "SandboxGone"
	BadInput    = "BadInput" // a caller's mistake: non-retryable
	Cancelled   = "Cancelled"
	// PartialBatch: a PPO step or warm-up round kept too few usable rollouts.
	PartialBatch = "PartialBatch"
	// RewardCollapse: a PPO step's batch earned under ppo.collapse_share of
	// the best earlier step's mean reward; not trained on, the campaign pauses.
	RewardCollapse = "RewardCollapse"
	// WarmupGate: the critic's explained variance stayed below the gate.
	WarmupGate = "WarmupGate"
	// TrainerBusy: another campaign holds the trainer (one campaign at a
	// time trains on a trainer); non-retryable, the campaign pauses on it.
	TrainerBusy = "TrainerBusy"
	// TrainerGone: the trainer a campaign is pinned to took no call within
	// the wait (its host or worker is gone); non-retryable, the campaign
	// pauses on it, naming the trainer.
	TrainerGone = "TrainerGone"
	// HostFull: a sandbox host at its limit of live sandboxes; retryable
	// (the retry may reach another host).
	HostFull = "HostFull"
	// SynthesisRejected: a synthesizer proposal that is not a valid task; the
	// round tries another variation.
	SynthesisRejected = "SynthesisRejected"
	// TurnLost: an agent turn whose command or keystrokes were sent, but
	// whose result was never recorded (the worker died mid-turn). It is never
	// sent again: non-retryable, and the rollout starts the episode over in a
	// fresh sandbox.
	TurnLost = "TurnLost"
)

// newf is an application error of type typ with a formatted message;
// retryable says whether Temporal may retry the activity that returned it.
func newf(typ string, retryable bool, format string, args []any) error {
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf(format, args...), typ,
		temporal.ApplicationErrorOptions{NonRetryable: !retryable})
}

// Infraf is a retryable infrastructure failure.
func Infraf(format string, args ...any) error {
	return newf(Infra, true, format, args)
}

// TaskInvalidf is the task's own fault; it names the file and field.
func TaskInvalidf(format string, args ...any) error {
	return newf(TaskInvalid, false, format, args)
}

// Verifierf is a verifier failure in the agent's sandbox, whose state can
// cause it: retried, then scored at reward 0 (as Harbor grades a verifier
// timeout). The host failing under the verifier is Infraf or SandboxGonef.
func Verifierf(format string, args ...any) error {
	return newf(Verifier, true, format, args)
}

// SandboxGonef asks the workflow for a fresh sandbox.
func SandboxGonef(format string, args ...any) error {
	return newf(SandboxGone, false, format, args)
}

// BadInputf is a non-retryable caller mistake.
func BadInputf(format string, args ...any) error {
	return newf(BadInput, false, format, args)
}

// RoutingMissingf is retryable by default: the rollout retries with a fresh sandbox.
func RoutingMissingf(format string, args ...any) error {
	return newf(RoutingMissing, true, format, args)
}

// SynthesisRejectedf is a proposal the round rejects: non-retryable.
func SynthesisRejectedf(format string, args ...any) error {
	return newf(SynthesisRejected, false, format, args)
}

// TrainerBusyf says which campaign holds the trainer: non-retryable.
func TrainerBusyf(format string, args ...any) error {
	return newf(TrainerBusy, false, format, args)
}

// TrainerGonef names the trainer that is gone: non-retryable.
func TrainerGonef(format string, args ...any) error {
	return newf(TrainerGone, false, format, args)
}

// HostFullf is a sandbox host at its limit: retryable.
func HostFullf(format string, args ...any) error {
	return newf(HostFull, true, format, args)
}

// TurnLostf reports a lost agent turn: non-retryable.
func TurnLostf(format string, args ...any) error {
	return newf(TurnLost, false, format, args)
}
