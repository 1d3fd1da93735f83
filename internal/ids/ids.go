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
