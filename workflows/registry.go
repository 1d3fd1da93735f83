package workflows

import "go.temporal.io/sdk/workflow"

// Workflow is one workflow type and the name it is registered under.
type Workflow struct {
	Name string
	Fn   any
}

// All is every workflow t1flow runs. The worker, the replay test and the test
// environment register this list and nothing else. Names are on the wire
// (histories, running executions, starters that start a workflow by its
// function), so each stays the function's name.
var All = []Workflow{
	{"RolloutWorkflow", RolloutWorkflow},
	{"EvalSweepWorkflow", EvalSweepWorkflow},
	{"EvalResumeWorkflow", EvalResumeWorkflow},
	{"ReaperWorkflow", ReaperWorkflow},
	{"SynthesisWorkflow", SynthesisWorkflow},
	{"SynthSweepWorkflow", SynthSweepWorkflow},
	{"AuditWorkflow", AuditWorkflow},
	{"AuditSweepWorkflow", AuditSweepWorkflow},
	{"CampaignWorkflow", CampaignWorkflow},
	{"PPOStepWorkflow", PPOStepWorkflow},
	{"CriticWarmupWorkflow", CriticWarmupWorkflow},
	{"CheckpointEvalWorkflow", CheckpointEvalWorkflow},
}

// Registry is what workflows register on: a worker, a replayer, a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers every workflow of All on r.
func Register(r Registry) {
	for _, w := range All {
		r.RegisterWorkflowWithOptions(w.Fn, workflow.RegisterOptions{Name: w.Name})
	}
}
