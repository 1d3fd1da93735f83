// Package harborout writes an eval sweep as Harbor writes a job: a job
// result.json (harbor.models.job.result.JobResult), one trial directory per
// rollout with its result.json (harbor.models.trial.result.TrialResult) and
// agent/trajectory.json in ATIF (harbor.models.trajectories.Trajectory), as
// the pinned harbor 0.26.0 defines them. It knows nothing of workflows: the
// caller hands it Trials.
package harborout

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// RewardKey is the key of Harbor's single-reward dict ({"reward": 1.0}).
const RewardKey = "reward"

// Trial is one rollout as Harbor needs to describe it.
type Trial struct {
	Name         string // the trial's directory and trial_name (unique in the job)
	TaskName     string
	TaskPath     string // LocalTaskId.path: where the task directory is (or was imported from)
	TaskChecksum string // t1flow's task ID (a content hash of the task directory)
	Source       string // the dataset: the pool or tasks directory; "" is Harbor's "adhoc"
	Agent        string // oracle, nop, terminus-2, ...
	AgentVersion string
	Model        string // "" for agents without a model (or a policy of unknown version)
	LLM          bool   // a model chose each step (policy, chat): not a deterministic dispatch
	// Reward is Harbor's reward (reward.json / reward.txt, else 1 or 0 by
	// resolution); nil when the rollout was not scored.
	Reward *float64
	// Rewards is the task's reward file as Harbor's verifier_result.rewards
	// when it named its rewards (several, or one under another key); nil
	// means {"reward": Reward}.
	Rewards map[string]float64
	// ExceptionType / ExceptionMessage: why the rollout was not scored (or,
	// for a scored one, what ended the agent, e.g. AgentTimeoutError); "" for none.
	ExceptionType    string
	ExceptionMessage string
	StartedAt        time.Time // zero: unknown
	FinishedAt       time.Time
	Instruction      string
	Steps            []Step
	InputTokens      *int // model agents: tokens in and out, when known
	OutputTokens     *int
	// Extra is t1flow's own account (outcome, T1 reward, assertions),
	// recorded in agent_result.metadata.
	Extra map[string]any
	// VerifierOutput is the tail of the verifier's output, written to
	// verifier/test-stdout.txt as Harbor keeps it ("" for none).
	VerifierOutput string
}

// RewardDict is t's verifier_result.rewards: Rewards, else {"reward":
// Reward}; nil when the trial has no reward.
func (t Trial) RewardDict() map[string]float64 {
	switch {
	case t.Reward == nil && len(t.Rewards) == 0:
		return nil
	case len(t.Rewards) > 0:
		return t.Rewards
	}
	return map[string]float64{RewardKey: *t.Reward}
}

// Step is one agent turn: what it sent to the terminal and what came back.
type Step struct {
	Message    string // the model's reply, or a description for scripted agents
	Keystrokes string // what was sent to the terminal ("" for none)
	Output     string
	ExitCode   int
	At         time.Time // zero: unknown
	TokenIDs   []int     // policy turns: sampled token IDs and log-probs
	Logprobs   []float64
}

// Job is a sweep: its trials and the figures t1flow computed over them.
type Job struct {
	ID         string // the sweep ID
	StartedAt  time.Time
	FinishedAt time.Time // zero: still running
	Total      int       // trials the job was asked for (those not in Trials are pending)
	Trials     []Trial
	Retries    int
}

// UUID is a name-based UUID (version 5 layout over SHA-256) so that
// exporting the same sweep twice gives the same IDs.
func UUID(name string) string {
	h := sha256.Sum256([]byte("t1flow:" + name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// timePtr is t as an RFC 3339 timestamp, nil when zero.
func timePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// datasetName is the name Harbor files a trial under in the job's evals.
func (t Trial) datasetName() string {
	if t.Source == "" {
		return "adhoc"
	}
	return t.Source
}

// EvalsKey is JobStats.format_agent_evals_key: agent__model__dataset.
func (t Trial) EvalsKey() string {
	if t.Model != "" {
		return t.Agent + "__" + t.Model + "__" + t.datasetName()
	}
	return t.Agent + "__" + t.datasetName()
}
