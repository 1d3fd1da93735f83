// Package ids holds every name that carries meaning across the wire: task
// queues, workflow IDs and search attributes. A re-run derives the same IDs
// and so finds the existing execution instead of starting a duplicate.
package ids

import (
	"fmt"
	"regexp"

	"go.temporal.io/sdk/temporal"
)

// Task queues.
const (
	ControlQueue = "t1flow-control" // workflows and light activities
	SandboxQueue = "t1flow-sandbox" // sandbox creation, on any sandbox host
	GPUQueue     = "t1flow-gpu"     // trainer calls
)

// SandboxHostQueue is where every activity of one sandbox runs after creation:
// the worker that owns the Docker host holding the container.
func SandboxHostQueue(host string) string { return "t1flow-sandbox-" + host }

// TrainerQueue is one trainer's own queue: a GPU worker serves it beside
// GPUQueue, and every trainer and inference call of a campaign pinned to that
// trainer goes there (a trainer holds one campaign's weights and journal).
func TrainerQueue(trainer string) string { return "t1flow-gpu-" + Clean(trainer) }

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Clean makes a user-given name safe for IDs, container names and store keys.
func Clean(s string) string { return unsafe.ReplaceAllString(s, "-") }

// RolloutID names one rollout attempt: (campaign, stage, step, task, attempt).
func RolloutID(campaign, stage string, step int, taskID string, attempt int) string {
	return fmt.Sprintf("%s.%s.%d.%s.%d", Clean(campaign), Clean(stage), step, taskID, attempt)
}

// RolloutWorkflowID is the workflow ID of a rollout.
func RolloutWorkflowID(rolloutID string) string { return "rollout/" + rolloutID }

// EvalSweepWorkflowID is the workflow ID of an eval sweep.
func EvalSweepWorkflowID(sweepID string) string { return "eval/" + Clean(sweepID) }

// EvalResumeWorkflowID is the workflow ID of round n of resuming a sweep.
func EvalResumeWorkflowID(sweepID string, round int) string {
	return fmt.Sprintf("eval/%s/resume-%d", Clean(sweepID), round)
}

// CheckpointEvalWorkflowID is the workflow ID of a sweep over checkpoints.
func CheckpointEvalWorkflowID(sweepID string) string { return "evalckpt/" + Clean(sweepID) }

// CheckpointSweepID is the eval sweep at the n-th (from 1) checkpoint of a
// sweep over checkpoints.
func CheckpointSweepID(sweepID string, n int, label string) string {
	return fmt.Sprintf("%s-%02d-%s", sweepID, n, Clean(label))
}

// CampaignWorkflowID is the workflow ID of a campaign.
func CampaignWorkflowID(name string) string { return "campaign/" + Clean(name) }

// CampaignEvalSweepID is a campaign's eval sweep at a checkpoint label (base, sft, step-0002, final).
func CampaignEvalSweepID(campaign, label string) string {
	return fmt.Sprintf("%s-eval-%s", Clean(campaign), label)
}

// PPOStepWorkflowID is the workflow ID of one PPO step of a campaign.
func PPOStepWorkflowID(campaign string, step int) string {
	return fmt.Sprintf("ppo/%s/%04d", Clean(campaign), step)
}

// WarmupWorkflowID is the workflow ID of a campaign's critic warm-up.
func WarmupWorkflowID(campaign string) string { return "warmup/" + Clean(campaign) }

// SynthesisWorkflowID is the workflow ID of one synthesis chain on a seed.
func SynthesisWorkflowID(runID, seedID string, chain int) string {
	return fmt.Sprintf("synth/%s/%s/%d", Clean(runID), seedID, chain)
}

// SynthesisCampaignID groups the oracle and nop rollouts of one synthesis
// chain (the campaign part of their rollout IDs).
func SynthesisCampaignID(runID, seedID string, chain int) string {
	return fmt.Sprintf("%s-%s-c%d", Clean(runID), seedID[:8], chain)
}

// AuditWorkflowID is the workflow ID of one task's audit within a run.
func AuditWorkflowID(runID, taskID string) string {
	return fmt.Sprintf("audit/%s/%s", Clean(runID), taskID)
}

// ReaperScheduleID is the per-host reaper schedule.
func ReaperScheduleID(host string) string { return "t1flow-reaper-" + Clean(host) }

// ReaperWorkflowID is the workflow a reaper schedule starts (the schedule appends a time).
func ReaperWorkflowID(host string) string { return "reaper/" + Clean(host) }

// Search attributes, registered on the dev server by temporal-dev/dev.sh.
var (
	CampaignID = temporal.NewSearchAttributeKeyKeyword("CampaignID")
	Stage      = temporal.NewSearchAttributeKeyKeyword("Stage")
	TaskID     = temporal.NewSearchAttributeKeyKeyword("TaskID")
	RolloutIDK = temporal.NewSearchAttributeKeyKeyword("RolloutID")
	Outcome    = temporal.NewSearchAttributeKeyKeyword("Outcome")
	Step       = temporal.NewSearchAttributeKeyInt64("Step")
	Attempt    = temporal.NewSearchAttributeKeyInt64("Attempt")
	Reward     = temporal.NewSearchAttributeKeyFloat64("Reward")
)

// SearchAttributeFlags are the dev server's --search-attribute values.
var SearchAttributeFlags = []string{
	"CampaignID=Keyword", "Stage=Keyword", "TaskID=Keyword", "RolloutID=Keyword",
	"Outcome=Keyword", "Step=Int", "Attempt=Int", "Reward=Double",
}
