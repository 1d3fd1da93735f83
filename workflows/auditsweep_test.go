package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/ids"
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
	env, pages := auditSweepEnv(nil)
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
	if len(*pages) != 5 || (*pages)[0] != [2]int{0, 100} || (*pages)[4] != [2]int{400, 100} {
		t.Errorf("pages read %v, want five of 100 from 0", *pages)
	}
	for c := 0; c < 5; c++ {
		var vs []audit.Verdict
		if err := memGet(AuditChunkKey("big", c), &vs); err != nil || len(vs) != 100 || vs[0].Name != fmt.Sprintf("t%04d", 100*c) {
			t.Errorf("chunk %d: %d verdicts (%v), want tasks %d..", c, len(vs), err, 100*c)
		}
	}
}

// auditSweepEnv is a test environment whose audit sweep reads its manifest
// and stores its chunks in memStore, with the activities named (registered
// before any mock); pages are the pages it read.
func auditSweepEnv(named map[string]any) (*testsuite.TestWorkflowEnvironment, *[][2]int) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	for name, fn := range named {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
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
	return env, &pages
}

// An audit whose ID a completed run holds (a sweep started again under the
// same run) is not run again: its verdict is read from that run. One whose
// ID a running audit holds is waited for, not an audit_failed verdict; one
// whose earlier run failed runs again. The manifest names tasks twice to
// start the same audit ID again: t1 pages apart, t3 twice in one page (at
// once), t2 after its first audit failed.
func TestAuditSweepReusesACompletedAuditAndRerunsAFailedOne(t *testing.T) {
	defer func(p int) { AuditPageSize = p }(AuditPageSize)
	AuditPageSize = 2
	ts := make([]task.Ref, 4)
	for i := range ts {
		ts[i] = task.Ref{ID: fmt.Sprintf("%016x", 0xb000+i), Name: fmt.Sprintf("t%d", i), Bundle: testTask.Bundle}
	}
	order := []int{1, 2, 0, 1, 3, 3, 2}
	var listed []task.Ref
	for _, i := range order {
		listed = append(listed, ts[i])
	}
	manifest, err := storeOK(context.Background(), activities.StoreJSONInput{Key: "audit-test/again.json", Value: task.Pool{Name: "again", Tasks: listed}})
	if err != nil {
		t.Fatal(err)
	}
	wid := func(i int) string { return ids.AuditWorkflowID("again", ts[i].ID) }
	var mu sync.Mutex
	runs, verdicts, held := map[string]int{}, map[string]audit.Verdict{}, map[string]int{}
	result := func(_ context.Context, in ChildResultInput) (ChildOutcome[audit.Verdict], error) {
		mu.Lock()
		defer mu.Unlock()
		held[in.WorkflowID]++
		if v, ok := verdicts[in.WorkflowID]; ok {
			return ChildOutcome[audit.Verdict]{Closed: true, Status: "Completed", Result: &v}, nil
		}
		// t3's first audit holds the ID from its start; the mock's body may
		// not have run yet when the refused second start asks (the test
		// environment runs them concurrently), so it reads as running until
		// its verdict is in, as Temporal would report it.
		if in.WorkflowID == wid(3) || runs[in.WorkflowID] > 0 && in.WorkflowID != wid(2) {
			return ChildOutcome[audit.Verdict]{Status: "Running"}, nil
		}
		return ChildOutcome[audit.Verdict]{Closed: true, Status: "Failed"}, nil
	}
	var report AuditReportInput
	build := func(_ context.Context, in AuditReportInput) (AuditSweepResult, error) {
		report = in // seven verdicts of four tasks: BuildAuditReport would refuse them
		return AuditSweepResult{}, nil
	}
	env, _ := auditSweepEnv(map[string]any{ActivityAuditResult: result, ActivityBuildAuditReport: build})
	env.OnActivity(act.ImportToPool, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ImportInput) (int, error) { return len(in.Tasks), nil })
	env.OnWorkflow(AuditWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in AuditInput) (audit.Verdict, error) {
		id := workflow.GetInfo(ctx).WorkflowExecution.ID
		mu.Lock()
		runs[id]++
		first := runs[id] == 1
		mu.Unlock()
		switch {
		case id == wid(2) && first:
			return audit.Verdict{}, errors.New("worker lost")
		case id == wid(3): // still running when its second start comes
			if err := workflow.Sleep(ctx, time.Minute); err != nil {
				return audit.Verdict{}, err
			}
		}
		v := audit.Verdict{Name: in.Task.Name, TaskID: in.Task.ID, Kept: in.Task.Name != "t0", Score: 0.9, HardRejects: []string{}}
		mu.Lock()
		verdicts[id] = v
		mu.Unlock()
		return v, nil
	})
	env.ExecuteWorkflow(AuditSweepWorkflow, AuditSweepInput{RunID: "again", TaskManifest: &manifest, Concurrency: 2, KeepPool: "kept"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if runs[wid(0)] != 1 || runs[wid(1)] != 1 || runs[wid(2)] != 2 || runs[wid(3)] != 1 {
		t.Errorf("audit runs %v: want t0, t1 (completed, then reused) and t3 (running, then waited for) once, t2 twice (failed, run again)", runs)
	}
	if len(held) != 2 || held[wid(1)] != 1 || held[wid(3)] < 2 {
		t.Errorf("verdicts read from Temporal %v: want t1's once, t3's while it ran and once it closed", held)
	}
	var got []audit.Verdict
	for n := 0; n < report.Chunks; n++ {
		var chunk []audit.Verdict
		if err := memGet(AuditChunkKey("again", n), &chunk); err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk...)
	}
	if len(got) != len(order) || report.Expected != len(order) {
		t.Fatalf("%d verdicts in %d chunks (expected %d), want %d", len(got), report.Chunks, report.Expected, len(order))
	}
	for k, v := range got {
		failed := strings.Contains(fmt.Sprint(v.Flags), "audit_failed")
		if v.Name != ts[order[k]].Name || failed != (k == 1) {
			t.Errorf("verdict %d: %s, flags %v; want %s's, audit_failed only for t2's first audit (verdict 1)", k, v.Name, v.Flags, ts[order[k]].Name)
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
