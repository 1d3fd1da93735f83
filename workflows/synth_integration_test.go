package workflows_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

func (r *rig) run(t *testing.T, wf any, id string, in any, out any, within time.Duration) {
	t.Helper()
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: ids.ControlQueue}, wf, in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := run.Get(ctx, out); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
}

// The sweep reads its six tasks two to a page and continues as new after
// four (audit-sweep-windowed): its verdicts, report and keep pool are the
// same as in one run. Started again under the same run, it reads the
// completed audits' verdicts instead of auditing again.
func TestAuditCatchesEachHardRejectAndKeepsAGoodTask(t *testing.T) {
	defer func(n int) { workflows.AuditPageSize = n }(workflows.AuditPageSize)
	workflows.AuditPageSize = 2
	r := newRig(t, true)
	refs := r.load(t, "testdata/audit")
	runID := fmt.Sprintf("audit-%d", time.Now().UnixNano())
	ctx := context.Background()
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "auditsweep/" + runID, TaskQueue: ids.ControlQueue}, workflows.AuditSweepWorkflow,
		workflows.AuditSweepInput{RunID: runID, Tasks: refs, Concurrency: 2, KeepPool: "kept", ContinueEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	first := run.GetRunID() // Get follows continue-as-new, and the run it ends on
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	var res workflows.AuditSweepResult
	if err := run.Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	if runs := continuedRuns(t, r.c, run.GetID(), first); runs != 2 {
		t.Errorf("the sweep ran in %d runs, want 2 (continue_every 4 of 6 tasks)", runs)
	}
	recordRun(t, r.c, run.GetID(), first, "testdata/auditsweep_windowed.json")
	recordHistory(t, r.c, run.GetID(), "testdata/auditsweep_windowed_after_continue.json")
	for n := 0; n < 3; n++ {
		var chunk []audit.Verdict
		if ref, err := r.st.Lookup(ctx, workflows.AuditChunkKey(runID, n)); err != nil || store.GetJSON(ctx, r.st, ref, &chunk) != nil || len(chunk) != 2 {
			t.Errorf("verdict chunk %d: %d verdicts (%v), want a page's 2", n, len(chunk), err)
		}
	}
	var rep workflows.AuditReport
	if err := store.GetJSON(context.Background(), r.st, res.Report, &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"hidden-requirement": audit.HiddenRequirements, "test-leakage": audit.TestLeakage,
		"shortcut-solution": audit.ShortcutSolution, "weak-verifier": audit.WeakVerifier,
	}
	for _, v := range rep.Verdicts {
		if v.Name == "good-sum" {
			if !v.Kept || len(v.HardRejects) != 0 || len(v.Dimensions) != 8 {
				t.Errorf("good task: kept %v, rejects %v, score %.3f, flags %v, dims %v", v.Kept, v.HardRejects, v.Score, v.Flags, v.Dimensions)
			}
			for name, score := range v.Dimensions {
				if name != "task_value" && score < 0.99 {
					t.Errorf("good task: %s = %.3f", name, score)
				}
			}
			continue
		}
		if v.Name == "good-small-count" {
			// Sound, with a small expected literal that the sandbox's own
			// files (the sealed verifier toolchain) hold: not a leak.
			if !v.Kept || len(v.HardRejects) != 0 {
				t.Errorf("good small-count task: kept %v, rejects %v, details %+v", v.Kept, v.HardRejects, v.Details)
			}
			continue
		}
		reason := want[v.Name]
		if v.Kept || len(v.HardRejects) != 1 || v.HardRejects[0] != reason {
			t.Errorf("%s: want exactly %s, got kept %v, rejects %v", v.Name, reason, v.Kept, v.HardRejects)
		}
		for _, d := range v.Details {
			if len(d.Evidence) == 0 {
				t.Errorf("%s: dimension %s has no evidence", v.Name, d.Name)
			}
		}
	}
	if res.Summary.Kept != 2 || res.Summary.AddedToPool != 2 || len(rep.Verdicts) != 6 {
		t.Fatalf("summary %+v", res.Summary)
	}
	p, err := task.LoadPool(context.Background(), r.st, "kept")
	if err != nil || len(p.Tasks) != 2 || taskNames(p.Tasks) != "good-small-count,good-sum" {
		t.Fatalf("keep pool: %+v %v", p, err)
	}
	// A sweep started again under the same run finds every audit completed:
	// their starts are refused and their verdicts read (audit-sweep-reuse),
	// no rollout runs again.
	rollouts := func() int64 {
		resp, err := r.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", ids.Clean(runID))})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := rollouts()
	var again workflows.AuditSweepResult
	r.run(t, workflows.AuditSweepWorkflow, "auditsweep/"+runID+"-again", workflows.AuditSweepInput{RunID: runID, Tasks: refs, Concurrency: 2,
		KeepPool: "kept", ContinueEvery: 4}, &again, 15*time.Minute)
	if again.Summary.Audited != 6 || again.Summary.Kept != 2 || again.Summary.AddedToPool != 0 || strings.Contains(fmt.Sprint(again.Summary.Flags), "audit_failed") {
		t.Errorf("the sweep started again: %+v; want the same 6 verdicts, 2 kept, none new to the pool, none audit_failed", again.Summary)
	}
	if after := rollouts(); after != before || before < 18 {
		t.Errorf("audit rollouts of run %s: %d before the sweep started again, %d after; want no new one (at least 3 a task)", runID, before, after)
	}
}

// continuedRuns counts the runs of workflow id from run on, following
// continue-as-new.
func continuedRuns(t *testing.T, c client.Client, id, run string) int {
	t.Helper()
	for n := 1; ; n++ {
		it := c.GetWorkflowHistory(context.Background(), id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		next := ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
		if next == "" {
			return n
		}
		run = next
	}
}

// The sweep runs its two chains a page of one at a time and continues as
// new after the first (synth-sweep-windowed). Every accepted round is a valid
// task, the same seeds and RNG seed give the same tasks, and a sweep started
// again under the same run reads the completed chains instead of running
// them twice.
func TestSynthesizedTasksAreValidAndReproducible(t *testing.T) {
	defer func(n int) { workflows.SynthPageSize = n }(workflows.SynthPageSize)
	workflows.SynthPageSize = 1
	r := newRig(t, true)
	seeds := r.load(t, "../examples/seeds/line-count")
	ctx := context.Background()
	synthRun := func(wid, runID string) (workflows.SynthSweepResult, string) {
		run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: ids.ControlQueue}, workflows.SynthSweepWorkflow,
			workflows.SynthSweepInput{RunID: runID, Seeds: seeds, PerSeed: 2, Rounds: 1, RNGSeed: 11, Pool: "synth-" + runID, ContinueEvery: 1})
		if err != nil {
			t.Fatal(err)
		}
		first := run.GetRunID() // Get follows continue-as-new, and the run it ends on
		wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		var res workflows.SynthSweepResult
		if err := run.Get(wctx, &res); err != nil {
			t.Fatalf("%s: %v", wid, err)
		}
		if runs := continuedRuns(t, r.c, wid, first); runs != 2 {
			t.Errorf("%s ran in %d runs, want 2 (continue_every 1 of 2 chains)", wid, runs)
		}
		return res, first
	}
	aID := fmt.Sprintf("s1-%d", time.Now().UnixNano())
	a, first := synthRun("synthsweep/"+aID, aID)
	recordRun(t, r.c, "synthsweep/"+aID, first, "testdata/synthsweep_windowed.json")
	recordHistory(t, r.c, "synthsweep/"+aID, "testdata/synthsweep_windowed_after_continue.json")
	if a.Summary.Synthesized != 2 || a.Summary.Chains != 2 || len(a.Tasks) != 2 || a.Summary.AddedToPool != 2 || a.TaskManifest == nil {
		t.Fatalf("synthesis: %+v, %d tasks, manifest %v", a.Summary, len(a.Tasks), a.TaskManifest)
	}
	for n := 0; n < 2; n++ {
		var chunk []workflows.SynthesisResult
		if ref, err := r.st.Lookup(ctx, workflows.SynthChunkKey(aID, n)); err != nil || store.GetJSON(ctx, r.st, ref, &chunk) != nil || len(chunk) != 1 || chunk[0].Chain != n {
			t.Errorf("chain chunk %d: %+v (%v), want chain %d", n, chunk, err, n)
		}
	}
	var rep workflows.SynthReport
	var listed task.Pool
	if store.GetJSON(ctx, r.st, a.Report, &rep) != nil || len(rep.Chains) != 2 || rep.Summary.Synthesized != 2 ||
		store.GetJSON(ctx, r.st, *a.TaskManifest, &listed) != nil || taskIDs(listed.Tasks) != taskIDs(a.Tasks) {
		t.Fatalf("report %+v, task manifest %+v", rep, listed)
	}
	// Every accepted round is a valid Harbor task that the oracle resolves and nop does not.
	oracle := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: a.Tasks, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}), 10*time.Minute)
	nop := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: a.Tasks, Agent: activities.AgentSpec{Kind: activities.AgentNop}}), 10*time.Minute)
	if oracle.Summary.Resolved != 2 || nop.Summary.Resolved != 0 || nop.Summary.Scored != 2 {
		t.Fatalf("oracle %+v / nop %+v", oracle.Summary, nop.Summary)
	}
	for _, ref := range a.Tasks {
		tk, err := task.Fetch(ctx, r.st, ref, t.TempDir())
		if err != nil {
			t.Fatalf("%s is not a valid task: %v", ref.Name, err)
		}
		sol, _ := os.ReadFile(filepath.Join(tk.Dir, task.SolutionFile))
		if !strings.Contains(string(sol), "# step ") {
			t.Errorf("%s: solution not lengthened", ref.Name)
		}
	}
	// The same seeds and RNG seed give the same tasks.
	bID := fmt.Sprintf("s2-%d", time.Now().UnixNano())
	b, _ := synthRun("synthsweep/"+bID, bID)
	if taskIDs(a.Tasks) != taskIDs(b.Tasks) {
		t.Fatalf("same seeds, different tasks: %s vs %s", taskIDs(a.Tasks), taskIDs(b.Tasks))
	}
	// A sweep started again under a's run finds both chains completed: their
	// starts are refused and their results read, no candidate is tried again.
	rollouts := func() int64 {
		resp, err := r.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID STARTS_WITH '%s-'", ids.Clean(aID))})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := rollouts()
	again, _ := synthRun("synthsweep/"+aID+"-again", aID)
	if taskIDs(again.Tasks) != taskIDs(a.Tasks) || again.Summary.Synthesized != 2 || again.Summary.AddedToPool != 0 {
		t.Errorf("the sweep started again: %+v, tasks %s; want a's tasks, none new to the pool", again.Summary, taskIDs(again.Tasks))
	}
	if after := rollouts(); after != before || before < 4 {
		t.Errorf("rollouts of run %s: %d before the sweep started again, %d after; want no new one", aID, before, after)
	}
}

func taskNames(refs []task.Ref) string {
	return sortedRefs(refs, func(r task.Ref) string { return r.Name })
}

func taskIDs(refs []task.Ref) string {
	return sortedRefs(refs, func(r task.Ref) string { return r.ID })
}

// sortedRefs is one field of every ref, sorted and comma-joined.
func sortedRefs(refs []task.Ref, field func(task.Ref) string) string {
	var s []string
	for _, r := range refs {
		s = append(s, field(r))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func TestLLMSynthesizerOutputIsValidatedLikeProcedural(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "3")
	seeds := r.load(t, "../examples/seeds/greeting-file")
	runID := fmt.Sprintf("llm-%d", time.Now().UnixNano())
	var res workflows.SynthesisResult
	r.run(t, workflows.SynthesisWorkflow, ids.SynthesisWorkflowID(runID, seeds[0].ID, 0), workflows.SynthesisInput{
		RunID: runID, Seed: seeds[0], Rounds: 1, MaxVariations: 2, RNGSeed: 1,
		Synth: activities.SynthSpec{Kind: "llm", Endpoint: inf.URL() + "/v1", Model: "reference", Temperature: 1},
	}, &res, 5*time.Minute)
	// The endpoint is given with /v1, as OpenAI clients often are. A random
	// model writes no valid step: every variation is rejected as invalid
	// output and the seed stops growing, with the reason recorded.
	if len(res.Accepted) != 0 || len(res.Rejected) != 2 || res.Rejected[0].Class != "invalid_output" ||
		!strings.Contains(res.Stopped, "synthesizer output rejected") {
		t.Fatalf("%+v", res)
	}
}

// An endpoint that answers HTTP errors is an infrastructure failure: retried,
// then the chain fails naming the endpoint; no proposal is counted rejected.
func TestLLMSynthesizerEndpointFailureFailsTheChain(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "3")
	seeds := r.load(t, "../examples/seeds/greeting-file")
	runID := fmt.Sprintf("llm-bad-%d", time.Now().UnixNano())
	endpoint := inf.URL() + "/not-openai"
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: ids.SynthesisWorkflowID(runID, seeds[0].ID, 0), TaskQueue: ids.ControlQueue, WorkflowExecutionTimeout: 3 * time.Minute,
	}, workflows.SynthesisWorkflow, workflows.SynthesisInput{
		RunID: runID, Seed: seeds[0], Rounds: 1, MaxVariations: 2, RNGSeed: 1,
		Synth: activities.SynthSpec{Kind: "llm", Endpoint: endpoint, Model: "reference", Temperature: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.SynthesisResult
	err = run.Get(context.Background(), &res)
	if err == nil {
		t.Fatalf("the chain succeeded against a wrong endpoint: %+v", res)
	}
	if !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("the failure does not name the endpoint and its answer: %v", err)
	}
	if len(res.Rejected) != 0 {
		t.Fatalf("endpoint failures were counted as rejections: %+v", res.Rejected)
	}
}

func TestWorkerKilledMidSynthesisResumes(t *testing.T) {
	r := newRig(t, false)
	bin := filepath.Join(r.dir, "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../worker").CombinedOutput(); err != nil {
		t.Fatalf("build worker: %v\n%s", err, out)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-role", "control,sandbox", "-host", r.host, "-store", filepath.Join(r.dir, "store"), "-reaper-interval", "1h")
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+r.addr, "T1FLOW_HOME="+testenv.StateDir())
		logf, _ := os.OpenFile(filepath.Join(r.dir, "worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	w := start()
	t.Cleanup(func() { w.Process.Kill(); w.Wait() })
	seeds := r.load(t, "../examples/seeds/config-dir")
	runID := fmt.Sprintf("crash-%d", time.Now().UnixNano())
	wid := ids.SynthesisWorkflowID(runID, seeds[0].ID, 0)
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: wid, TaskQueue: ids.ControlQueue},
		workflows.SynthesisWorkflow, workflows.SynthesisInput{RunID: runID, Seed: seeds[0], Rounds: 3, RNGSeed: 5})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		v, err := r.c.QueryWorkflow(context.Background(), wid, "", workflows.QueryProgress)
		var p workflows.SynthesisProgress
		if err == nil && v.Get(&p) == nil && p.Accepted >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("synthesis never accepted a round")
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.Process.Signal(syscall.SIGKILL)
	w.Wait()
	time.Sleep(time.Second)
	w = start()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var res workflows.SynthesisResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Accepted) != 3 {
		t.Fatalf("%d rounds accepted (%s): %+v", len(res.Accepted), res.Stopped, res.Rejected)
	}
	parent := seeds[0].ID
	for i, a := range res.Accepted {
		if a.Round != i+1 || a.Parent != parent {
			t.Fatalf("round %d: %+v (parent want %s)", i+1, a, parent)
		}
		parent = a.Task.ID
	}
	// Every candidate was checked exactly once: two rollouts (oracle, nop) per variation tried.
	tried := len(res.Accepted) + len(res.Rejected)
	resp, err := r.c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s-%s-c0'", ids.Clean(runID), seeds[0].ID[:8]),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != int64(2*tried) {
		t.Fatalf("%d rollouts for %d candidates: a round ran twice or was lost", resp.Count, tried)
	}
}
