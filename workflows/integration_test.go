package workflows_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

type rig struct {
	c     client.Client
	addr  string
	st    store.Store
	dir   string
	host  string
	tasks map[string]task.Ref
}

// newRig connects to the dev server and Docker; inProcess also runs a worker
// of every role in this process.
func newRig(t *testing.T, inProcess bool) *rig {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, err := store.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{c: c, addr: srv.Address, st: st, dir: dir, host: testenv.HostName(ids.Clean(t.Name())), tasks: map[string]task.Ref{}}
	if inProcess {
		testenv.Worker(t, c, roles.All, &activities.Activities{
			Docker: d, Store: st, Temporal: c, Host: r.host, TaskCache: filepath.Join(dir, "cache"),
		})
	}
	return r
}

// load bundles task directories into the rig's store.
func (r *rig) load(t *testing.T, dirs ...string) []task.Ref {
	var refs []task.Ref
	for _, d := range dirs {
		ts, err := task.LoadAll(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			ref, err := task.Bundle(context.Background(), r.st, tk)
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
			r.tasks[ref.Name] = ref
		}
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Name < refs[j].Name })
	return refs
}

func (r *rig) startSweep(t *testing.T, in workflows.EvalSweepInput) client.WorkflowRun {
	t.Helper()
	in.SweepID = fmt.Sprintf("%s-%d", ids.Clean(t.Name()), time.Now().UnixNano())
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: ids.EvalSweepWorkflowID(in.SweepID), TaskQueue: ids.ControlQueue,
	}, workflows.EvalSweepWorkflow, in)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func (r *rig) report(t *testing.T, run client.WorkflowRun, within time.Duration) workflows.EvalReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var res workflows.EvalSweepResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("sweep %s: %v", run.GetID(), err)
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(ctx, r.st, res.Report, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestOracleResolvesEveryExampleAndNopNone(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks")
	if len(refs) < 8 {
		t.Fatalf("want at least 8 example tasks, got %d", len(refs))
	}
	oracle := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 3}), 15*time.Minute)
	if len(oracle.Rollouts) != len(refs) {
		t.Fatalf("oracle: %d rollouts for %d tasks", len(oracle.Rollouts), len(refs))
	}
	for _, ro := range oracle.Rollouts {
		if ro.Outcome != workflows.OutcomeResolved || ro.Passed != ro.Total || ro.Total < 3 || ro.Total > 12 {
			t.Errorf("oracle on %s: %s %d/%d (%s)", ro.Name, ro.Outcome, ro.Passed, ro.Total, ro.Error)
		}
		if want := float64(ro.Total) / workflows.DefaultS; ro.Reward != want {
			t.Errorf("oracle on %s: reward %v, want %v (passing / S)", ro.Name, ro.Reward, want)
		}
	}
	if oracle.Summary.ResolvedRate != 1 {
		t.Errorf("oracle resolved rate %v", oracle.Summary.ResolvedRate)
	}
	nop := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentNop}, Concurrency: 3}), 10*time.Minute)
	for _, ro := range nop.Rollouts {
		if ro.Outcome != workflows.OutcomeUnresolved || !ro.Scored || ro.Passed >= ro.Total {
			t.Errorf("nop on %s: %s %d/%d (%s)", ro.Name, ro.Outcome, ro.Passed, ro.Total, ro.Error)
		}
	}
	if len(nop.Rollouts) != len(refs) || nop.Summary.Resolved != 0 {
		t.Errorf("nop: %d rollouts, %d resolved", len(nop.Rollouts), nop.Summary.Resolved)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left after the sweeps: %v", left)
	}
}

func TestIncompleteSolutionGetsExactPartialReward(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "testdata/tasks/partial-solution")
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, S: 20}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.Outcome != workflows.OutcomeUnresolved || ro.Passed != 3 || ro.Total != 5 || ro.Reward != 3.0/20 {
		t.Fatalf("got %s %d/%d reward %v, want unresolved 3/5 reward 0.15", ro.Outcome, ro.Passed, ro.Total, ro.Reward)
	}
	var rec workflows.RolloutRecord
	if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, a := range rec.Verify.Assertions {
		if a.Status != activities.StatusPassed {
			failed[a.Name] = a.Message
		}
	}
	if len(failed) != 2 || failed["test_outputs::test_d"] == "" || failed["test_outputs::test_e"] == "" {
		t.Fatalf("per-assertion detail: %v", rec.Verify.Assertions)
	}
}

func TestAgentCannotChangeItsReward(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/csv-revenue-report")
	forge := []string{
		`mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && echo '{"reward": 1}' > /logs/verifier/reward.json`,
		`printf '<testsuite><testcase name="a"/><testcase name="b"/></testsuite>' > /logs/verifier/junit.xml`,
		`printf 'def test_x():\n    pass\n' > /tests/test_outputs.py && printf 'echo 1 > /logs/verifier/reward.txt\n' > /tests/test.sh`,
		`nohup bash -c 'while :; do echo "{\"results\":{\"tests\":[{\"name\":\"x\",\"status\":\"passed\"}]}}" > /logs/verifier/ctrf.json 2>/dev/null; sleep 0.01; done' >/dev/null 2>&1 & echo writer started`,
	}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: forge}}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.Turns != len(forge) {
		t.Fatalf("the agent ran %d of %d turns: %s", ro.Turns, len(forge), ro.Error)
	}
	if ro.Outcome != workflows.OutcomeUnresolved || ro.Passed != 0 || ro.Total != 5 || ro.Reward != 0 {
		t.Fatalf("forged results changed the verdict: %s %d/%d reward %v", ro.Outcome, ro.Passed, ro.Total, ro.Reward)
	}
}

// sandboxDeployments lists the sandboxes of host (only the running ones
// when running is set) with the deployment each names.
func sandboxDeployments(t *testing.T, host string, running bool) map[string]string {
	t.Helper()
	args := []string{"ps", "--filter", "label=" + sandbox.LabelHost + "=" + host, "--format", `{{.ID}} {{.Label "` + sandbox.LabelDeployment + `"}}`}
	if !running {
		args = append(args, "-a")
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, dep, ok := strings.Cut(line, " "); ok || id != "" {
			m[id] = dep
		}
	}
	return m
}

// TestWorkerKilledMidSweep kills the worker process with SIGKILL while
// rollouts run, restarts it, and checks that the sweep completes with every
// rollout counted once and that the reaper leaves no t1flow container behind.
func TestWorkerKilledMidSweep(t *testing.T) {
	r := newRig(t, false)
	// Its own home: the worker never touches the developer's .t1flow.
	home := filepath.Join(r.dir, "home")
	w := testenv.StartWorkerProcess(t, &testenv.WorkerProcess{
		Home: home,
		Args: []string{"-role", "control,sandbox", "-host", r.host, "-store", filepath.Join(r.dir, "store"), "-reaper-interval", "1h"},
		Env:  []string{"TEMPORAL_ADDRESS=" + r.addr},
	})
	traces := filepath.Join(home, "traces", "worker.jsonl")
	before := int64(0)

	refs := r.load(t, "../examples/tasks/csv-revenue-report", "../examples/tasks/log-level-counter",
		"../examples/tasks/sort-photos-by-date", "../examples/tasks/fix-stats-module")
	agent := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 1", "sleep 1", "echo step >> /tmp/steps", "sleep 1"}}
	run := r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, Concurrency: 2})

	// Kill once a rollout has finished and others are mid-episode: a
	// sandbox seen running in two polls in a row, so that it is not one
	// whose rollout just ended and which the worker is removing (the daemon
	// finishes a removal the killed worker asked for).
	deadline := time.Now().Add(3 * time.Minute)
	seenBefore := map[string]bool{}
	for {
		if time.Now().After(deadline) {
			t.Fatal("the sweep never reached the middle")
		}
		v, err := r.c.QueryWorkflow(context.Background(), run.GetID(), "", workflows.QueryProgress)
		var p workflows.Progress
		running := sandboxDeployments(t, r.host, true)
		steady := false
		for id := range running {
			steady = steady || seenBefore[id]
		}
		if err == nil && v.Get(&p) == nil && p.Done >= 1 && p.Running >= 1 && steady {
			break
		}
		seenBefore = map[string]bool{}
		for id := range running {
			seenBefore[id] = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.Kill9(t)
	// One listing for both checks, so a removal finishing between two
	// listings cannot make them disagree.
	left := sandboxDeployments(t, r.host, false)
	if len(left) == 0 {
		t.Fatal("expected the killed worker's sandboxes to outlive it")
	}
	for id, dep := range left {
		if dep != r.addr+"/default" {
			t.Errorf("the worker's sandbox %.12s names deployment %q, not its own %s/default", id, dep, r.addr)
		}
	}
	time.Sleep(time.Second)
	w.Start(t)

	rep := r.report(t, run, 5*time.Minute)
	if len(rep.Rollouts) != len(refs) {
		t.Fatalf("%d rollouts for %d tasks", len(rep.Rollouts), len(refs))
	}
	seen := map[string]bool{}
	for _, ro := range rep.Rollouts {
		if seen[ro.RolloutID] {
			t.Errorf("rollout %s counted twice", ro.RolloutID)
		}
		seen[ro.RolloutID] = true
		// A killed worker costs no sandbox, except for a turn it killed after
		// the command was sent: that turn is lost (never run again in that
		// sandbox) and the episode starts over in a fresh one.
		if !ro.Scored || ro.Turns != len(agent.Commands) || ro.SandboxAttempts != 1+ro.LostTurns {
			t.Errorf("%s: scored %v, %d turns, %d sandboxes, %d lost turns (%s)", ro.Name, ro.Scored, ro.Turns, ro.SandboxAttempts, ro.LostTurns, ro.Error)
		}
		if ro.LostTurns > 0 {
			t.Logf("%s: %d turn(s) lost to the kill, %d sandboxes", ro.Name, ro.LostTurns, ro.SandboxAttempts)
		}
	}
	// Each rollout ran as exactly one workflow execution.
	resp, err := r.c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", rep.SweepID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != int64(len(refs)) {
		t.Errorf("%d rollout executions for %d rollouts", resp.Count, len(refs))
	}

	// The worker traces workflows and activities with OpenTelemetry (to a file by default).
	time.Sleep(6 * time.Second) // the span batcher exports every 5 s
	b, _ := os.ReadFile(traces)
	if int64(len(b)) <= before || !strings.Contains(string(b[before:]), "RolloutWorkflow") || !strings.Contains(string(b[before:]), "AgentTurn") {
		t.Errorf("no rollout spans in %s", traces)
	}

	// A leftover from a crash whose workflow is gone: the reaper removes it.
	base := sandbox.BaseImageTag()
	out, err := exec.Command("docker", "run", "-d", "--network", "none",
		"--label", sandbox.LabelRollout+"=orphan", "--label", sandbox.LabelHost+"="+r.host,
		"--label", sandbox.LabelWorkflow+"=rollout/never-existed", base, "sleep", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	// Another host's sandbox on the same daemon (a second worker, perhaps on
	// another Temporal): its workflow is unknown here, and it is not ours to remove.
	other := r.host + "-other"
	out, err = exec.Command("docker", "run", "-d", "--network", "none",
		"--label", sandbox.LabelRollout+"=someone-elses", "--label", sandbox.LabelHost+"="+other,
		"--label", sandbox.LabelWorkflow+"=rollout/elsewhere", base, "sleep", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	otherID := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", otherID).Run()
	// A sandbox of this host name made by another deployment (a worker of
	// the same host against another Temporal): its workflow is unknown here
	// too, and it is not ours to remove either.
	elsewhere := "127.0.0.2:7233/default"
	out, err = exec.Command("docker", "run", "-d", "--network", "none",
		"--label", sandbox.LabelRollout+"=orphan", "--label", sandbox.LabelHost+"="+r.host, "--label", sandbox.LabelDeployment+"="+elsewhere,
		"--label", sandbox.LabelWorkflow+"=rollout/never-existed", base, "sleep", "600").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	elsewhereID := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", elsewhereID).Run()
	reap, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: ids.ReaperWorkflowID(r.host) + "-test", TaskQueue: ids.ControlQueue,
	}, workflows.ReaperWorkflow, workflows.ReaperInput{Host: r.host, TTLSec: 3600})
	if err != nil {
		t.Fatal(err)
	}
	var rr activities.ReapResult
	if err := reap.Get(context.Background(), &rr); err != nil {
		t.Fatal(err)
	}
	if len(rr.Removed) < 1 {
		t.Errorf("the reaper removed nothing: %+v", rr)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 1 || !strings.HasPrefix(elsewhereID, left[0]) {
		t.Errorf("t1flow containers left after the reaper: %v; want only another deployment's %.12s", left, elsewhereID)
	}
	if kept := testenv.Containers(t, sandbox.LabelHost, other); len(kept) != 1 {
		t.Errorf("the reaper of %s touched another host's sandbox: %v", r.host, kept)
	}
}
