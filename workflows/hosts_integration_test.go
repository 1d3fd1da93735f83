package workflows_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestRolloutsMoveOffAHostThatStopsForGood: two sandbox workers with
// different host names share a sweep; one is killed with SIGKILL while its
// rollouts are in flight and never comes back. Every rollout completes on
// the other host within the control worker's -host-wait (5 s here, 10 min
// by default), solved with the right reward, each counted once; the dead
// host's sandboxes outlive it, and the surviving host's reaper (the two
// share a Docker daemon) removes them once their rollouts closed.
func TestRolloutsMoveOffAHostThatStopsForGood(t *testing.T) {
	r := newRig(t, false)
	hostA, hostB := r.host+"-a", r.host+"-b"
	t.Cleanup(func() { // only when a check below failed
		for _, h := range []string{hostA, hostB} {
			if left := testenv.Containers(t, sandbox.LabelHost, h); len(left) > 0 {
				exec.Command("docker", append([]string{"rm", "-f"}, left...)...).Run()
			}
		}
	})
	worker := func(host string, args ...string) *testenv.WorkerProcess {
		return testenv.StartWorkerProcess(t, &testenv.WorkerProcess{
			Home: filepath.Join(r.dir, "home-"+host),
			Args: append([]string{"-host", host, "-store", filepath.Join(r.dir, "store"), "-reaper-interval", "1h",
				"-max-sandboxes", "2"}, args...),
			Env: []string{"TEMPORAL_ADDRESS=" + r.addr},
		})
	}
	// B runs the workflows too; A is a sandbox host only, so killing it
	// takes nothing else with it.
	worker(hostB, "-role", "control,sandbox", "-host-wait", "5s")
	a := worker(hostA, "-role", "sandbox")
	// Both must take work before the sweep starts: B alone finishes it in
	// seconds, and A then never gets a rollout to be killed with.
	for _, h := range []string{hostA, hostB} {
		testenv.WaitPollers(t, r.c, ids.SandboxHostQueue(h), 1, 2*time.Minute)
	}
	testenv.WaitPollers(t, r.c, ids.SandboxQueue, 2, 2*time.Minute)

	refs := r.load(t, "../examples/tasks/stale-cache-cleanup")
	// The task's solution as a scripted agent, after a pause that keeps
	// sandboxes busy when the kill comes.
	agent := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 4",
		`find /var/cache/app -type f \( -name '*.tmp' -o -name '*.cache' \) -mtime +30 -print | sort > /root/cleanup.log && xargs -r -d '\n' rm -f < /root/cleanup.log`}}
	const attempts = 6
	run := r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, Attempts: attempts, Concurrency: 4})

	// Kill A once both hosts run rollouts, one of them mid-episode on A.
	sweep := strings.TrimPrefix(run.GetID(), "eval/")
	deadline := time.Now().Add(2 * time.Minute)
	for on := agentPhases(t, r, sweep); on[hostA] < 1 || len(on) < 2; on = agentPhases(t, r, sweep) {
		if time.Now().After(deadline) {
			t.Fatalf("the hosts never shared the sweep: rollouts mid-episode by host %v", on)
		}
		if d, err := r.c.DescribeWorkflowExecution(context.Background(), run.GetID(), ""); err == nil &&
			d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the sweep closed (%s) before host %s ran one of its rollouts mid-episode: %v", d.WorkflowExecutionInfo.Status, hostA, on)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.Kill9(t)
	killed := time.Now()
	if len(testenv.Containers(t, sandbox.LabelHost, hostA)) == 0 {
		t.Fatal("expected the killed host's sandboxes to outlive it")
	}

	rep := r.report(t, run, 3*time.Minute)
	// Far below the default host wait: the moved rollouts waited 5 s for A.
	if took := time.Since(killed); took > 90*time.Second {
		t.Errorf("the sweep finished %s after the kill, want well within the default host wait", took.Round(time.Second))
	}
	checkMovedRollouts(t, r, rep, attempts, hostA)

	// A's sandboxes are left (nobody was there to destroy them); B's reaper
	// removes them, their rollouts being closed, and B's own are all gone.
	if len(testenv.Containers(t, sandbox.LabelHost, hostA)) == 0 {
		t.Fatal("expected the dead host's sandboxes to be left for a reaper")
	}
	if left := testenv.Containers(t, sandbox.LabelHost, hostB); len(left) != 0 {
		t.Errorf("sandboxes of %s left after the sweep: %v", hostB, left)
	}
	reap, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: ids.ReaperWorkflowID(hostB) + "-test", TaskQueue: ids.ControlQueue,
	}, workflows.ReaperWorkflow, workflows.ReaperInput{Host: hostB, TTLSec: 3600})
	if err != nil {
		t.Fatal(err)
	}
	var rr activities.ReapResult
	if err := reap.Get(context.Background(), &rr); err != nil {
		t.Fatal(err)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, hostA); len(left) != 0 {
		t.Errorf("sandboxes of the dead host %s left after %s's reaper: %v (reaped %+v)", hostA, hostB, left, rr)
	}
}

// checkMovedRollouts: every rollout solved once with reward passing / S; at
// least one started over after its sandbox's host was found gone, and its
// record names that host.
func checkMovedRollouts(t *testing.T, r *rig, rep workflows.EvalReport, n int, dead string) {
	t.Helper()
	if len(rep.Rollouts) != n {
		t.Fatalf("%d rollouts, want %d", len(rep.Rollouts), n)
	}
	seen := map[string]bool{}
	moved := 0
	for _, ro := range rep.Rollouts {
		if seen[ro.RolloutID] {
			t.Errorf("rollout %s counted twice", ro.RolloutID)
		}
		seen[ro.RolloutID] = true
		if ro.Outcome != workflows.OutcomeResolved || ro.Total < 3 || ro.Reward != float64(ro.Total)/workflows.DefaultS || ro.Turns != 2 {
			t.Errorf("%s #%d: %s %d/%d reward %v, %d turns, %d sandboxes (%s)", ro.Name, ro.Attempt, ro.Outcome, ro.Passed, ro.Total, ro.Reward,
				ro.Turns, ro.SandboxAttempts, ro.Error)
		}
		if ro.SandboxAttempts == 1 || ro.Record == nil {
			continue
		}
		var rec workflows.RolloutRecord
		if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
			t.Fatal(err)
		}
		if why := strings.Join(rec.Failures, "; "); strings.Contains(why, "sandbox host "+dead+" took no call") {
			if moved++; moved == 1 {
				recordHistory(t, r.c, ro.WorkflowID, "testdata/rollout_host_gone.json")
			}
			t.Logf("attempt %d moved: %s", ro.Attempt, why)
		}
	}
	if moved == 0 {
		t.Errorf("no rollout started over after %s was found gone", dead)
	}
	resp, err := r.c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", rep.SweepID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != int64(n) {
		t.Errorf("%d rollout executions for %d rollouts", resp.Count, n)
	}
}

// agentPhases counts the sweep's running rollouts by the host of their
// sandbox: those in the agent phase, and (as 0) hosts with rollouts in other
// phases.
func agentPhases(t *testing.T, r *rig, sweep string) map[string]int {
	t.Helper()
	ctx := context.Background()
	resp, err := r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf(
		"WorkflowType = 'RolloutWorkflow' AND ExecutionStatus = 'Running' AND CampaignID = '%s'", sweep)})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int{}
	for _, e := range resp.Executions {
		v, err := r.c.QueryWorkflow(ctx, e.Execution.WorkflowId, "", workflows.QueryStatus)
		var st workflows.RolloutStatus
		if err != nil || v.Get(&st) != nil || st.Host == "" {
			continue
		}
		if st.Phase == "agent" {
			on[st.Host]++
		} else {
			on[st.Host] += 0
		}
	}
	return on
}
