package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// The first run of an audit sweep of 1,200 tasks audits continue_every
// (500) of them a page at a time, stores each page's verdicts as a chunk,
// keeps the kept ones page by page, and continues as new with its window:
// no task, similarity or verdict rides in its input, and the next run picks
// up at task 500.
func TestAuditSweepContinuesAsNewWithItsWindow(t *testing.T) {
	const n = 1200
	tasks := make([]task.Ref, n)
	for i := range tasks {
		tasks[i] = task.Ref{ID: fmt.Sprintf("%016x", i+1), Name: fmt.Sprintf("t%04d", i), Bundle: testTask.Bundle}
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	var pages [][2]int
	env.RegisterActivityWithOptions(func(_ context.Context, in AuditPageInput) (AuditPage, error) {
		pages = append(pages, [2]int{in.Offset, in.Limit})
		var p task.Pool
		if err := memGet(in.Manifest.URI[len("file:///store/"):], &p); err != nil {
			return AuditPage{}, err
		}
		return AuditPage{Offset: in.Offset, Tasks: p.Tasks[in.Offset:min(in.Offset+in.Limit, len(p.Tasks))], Total: len(p.Tasks)}, nil
	}, activity.RegisterOptions{Name: ActivityAuditTaskPage})
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK)
	env.OnActivity(act.PoolSimilarityStored, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.StoredSimilarityInput) (activities.StoredSimilarity, error) {
		var p task.Pool
		if err := memGet(in.Manifest.URI[len("file:///store/"):], &p); err != nil {
			return activities.StoredSimilarity{}, err
		}
		return activities.StoredSimilarity{Tasks: len(p.Tasks)}, nil
	})
	var imported int
	env.OnActivity(act.ImportToPool, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ImportInput) (int, error) {
		imported += len(in.Tasks)
		return len(in.Tasks), nil
	})
	env.OnWorkflow(AuditWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in AuditInput) (audit.Verdict, error) {
		var i int
		fmt.Sscanf(in.Task.Name, "t%d", &i)
		return audit.Verdict{Name: in.Task.Name, TaskID: in.Task.ID, Kept: i%3 == 0}, nil
	})
	env.ExecuteWorkflow(AuditSweepWorkflow, AuditSweepInput{RunID: "big", Tasks: tasks, Concurrency: 8, KeepPool: "kept"})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("first run ended with %v, want continue-as-new", err)
	}
	var next AuditSweepInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	w := next.Window
	if len(next.Tasks) != 0 || next.TaskManifest == nil || w == nil {
		t.Fatalf("next run's input: %d tasks inline, manifest %v, window %v: want a manifest and a window only", len(next.Tasks), next.TaskManifest, w)
	}
	if w.Tasks != n || w.Next != DefaultContinueEvery || w.Chunks != 5 || w.Runs != 1 || w.Kept != 167 || w.AddedToPool != 167 || imported != 167 {
		t.Errorf("window %+v, imported %d: want 1200 tasks, next 500, 5 chunks, 1 run, 167 kept and added", *w, imported)
	}
	if len(pages) != 5 || pages[0] != [2]int{0, 100} || pages[4] != [2]int{400, 100} {
		t.Errorf("pages read %v, want five of 100 from 0", pages)
	}
	for c := 0; c < 5; c++ {
		var vs []audit.Verdict
		if err := memGet(AuditChunkKey("big", c), &vs); err != nil || len(vs) != 100 || vs[0].Name != fmt.Sprintf("t%04d", 100*c) {
			t.Errorf("chunk %d: %d verdicts (%v), want tasks %d..", c, len(vs), err, 100*c)
		}
	}
}

// Bad input names the field at fault.
func TestAuditSweepInputNamesTheFieldAtFault(t *testing.T) {
	for want, in := range map[string]AuditSweepInput{
		"audit: no tasks":               {},
		"give one, not both":            {Tasks: []task.Ref{testTask}, TaskManifest: &testTask.Bundle},
		"task_manifest.uri is empty":    {TaskManifest: &store.Ref{}},
		"continue_every -1: must be at": {Tasks: []task.Ref{testTask}, ContinueEvery: -1},
	} {
		if err := in.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// TestAuditKeepsNoTaskWhoseVerifierFails: a reference solution whose
// verifier failed (verifier_error, scored 0 for an agent since
// verifier-error-scored) says the task's verifier is broken, not that the
// reference scored 0; the audit judges it as before, a run it could not
// judge (the infra flag), and keeps no such task. Read as a scored 0, a
// clean, hard task whose verifier always hangs scored 0.8 and was kept.
func TestAuditKeepsNoTaskWhoseVerifierFails(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	steps := []string{"a", "b", "c", "d", "e", "f"}
	env.OnActivity(act.AuditStatic, mock.Anything, mock.Anything).Return(activities.AuditStaticResult{
		Static: audit.Static{Clarity: 1, Steps: steps, CheckedPaths: []string{"/app/out"}},
		Info:   audit.TaskInfo{Name: "hangs", ID: testTask.ID, Difficulty: "hard"}}, nil)
	env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		if rin.Stage == "audit-oracle" {
			return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeVerifierError, Scored: true, Error: "VerifierError: tests/test.sh timed out after 600s"})
		}
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeUnresolved, Scored: true, Total: 5})
	})
	env.ExecuteWorkflow(AuditWorkflow, AuditInput{RunID: "r", Task: testTask})
	var v audit.Verdict
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if err := env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}
	if v.Kept || !strings.Contains(fmt.Sprint(v.Flags), "infra") {
		t.Fatalf("kept %v (score %v), flags %v: a task whose reference's verifier failed must not be kept", v.Kept, v.Score, v.Flags)
	}
}
