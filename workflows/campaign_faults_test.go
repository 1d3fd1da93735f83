package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestCampaignSurvivesCrashes runs one campaign through every crash an
// operator meets: the worker (control, sandbox and gpu roles in one process)
// is killed with SIGKILL during rollouts and again during a trainer step, the
// Temporal server is stopped and started again mid-step, and the trainer
// process is killed during a step. The campaign must finish every step, each
// trained exactly once, with no rollout lost or counted twice and no sandbox
// left behind.
func TestCampaignSurvivesCrashes(t *testing.T) {
	srv, c := testenv.RestartableDevServer(t)
	testenv.Docker(t)
	home := t.TempDir()
	st, err := store.NewLocal(filepath.Join(home, "store"))
	if err != nil {
		t.Fatal(err)
	}
	host := testenv.HostName("crashes")
	var refs []task.Ref
	for _, d := range []string{"../examples/tasks/log-level-counter", "../examples/tasks/sort-photos-by-date"} {
		ts, err := task.LoadAll(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			ref, err := task.Bundle(context.Background(), st, tk)
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
	}
	if _, _, err := task.ImportRefs(context.Background(), st, "train", refs); err != nil {
		t.Fatal(err)
	}
	w := testenv.StartWorkerProcess(t, &testenv.WorkerProcess{
		Home: home,
		Args: []string{"-role", "all", "-host", host, "-gpus", "cpu", "-inference-args", "--threads 1", "-reaper-interval", "1h"},
		Env:  []string{"TEMPORAL_ADDRESS=" + srv.Address, "T1FLOW_STORE=" + filepath.Join(home, "store")},
	})

	name := fmt.Sprintf("k%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.SFT.Enabled, cfg.Eval.Base, cfg.Eval.AtEnd = false, false, false
	cfg.Pools.Eval = nil
	cfg.PPO.Steps = 4
	cfg.PPO.ContinueAsNewEvery = 2
	// Longer rollouts (3 turns of up to 64 tokens): the kills below must
	// land while a step's rollouts hold sandboxes, a window the poll has to
	// catch; at 2 turns of 24 tokens it lasted a few seconds, and on a busy
	// machine a whole campaign once ran through it unseen.
	cfg.Policy.MaxNewTokens, cfg.PPO.TurnCap = 64, 3
	wid := ids.CampaignWorkflowID(name)
	startCampaign(t, c, cfg)
	opsLog := filepath.Join(home, "gpu", "trainer", "ops.log")
	status := func() (workflows.CampaignStatus, bool) {
		var s workflows.CampaignStatus
		v, err := c.QueryWorkflow(context.Background(), wid, "", workflows.QueryStatus)
		return s, err == nil && v.Get(&s) == nil
	}
	rolloutsRunning := func(step int) func() bool {
		return func() bool {
			s, ok := status()
			return ok && s.Phase == workflows.PhasePPO && s.Step == step-1 && strings.HasPrefix(s.InFlight, "ppo step") &&
				len(testenv.Containers(t, sandbox.LabelHost, host)) > 0 && !strings.Contains(readFile(opsLog), fmt.Sprintf("/ppo/%d", step))
		}
	}
	// ppo_step of step n has begun and not finished.
	training := func(step int) func() bool {
		begin := regexp.MustCompile(fmt.Sprintf(`begin ppo_step %s/\S+/ppo/%d\n`, name, step))
		commit := regexp.MustCompile(fmt.Sprintf(`commit ppo_step %s/\S+/ppo/%d `, name, step))
		return func() bool {
			l := readFile(opsLog)
			return begin.MatchString(l) && !commit.MatchString(l)
		}
	}

	// 1. The worker dies while step 1's rollouts hold sandboxes.
	waitFor(t, c, wid, "step 1's rollouts", 8*time.Minute, rolloutsRunning(1))
	w.Kill9(t)
	time.Sleep(time.Second)
	w.Start(t)
	// 2. The worker dies while the trainer runs step 2's update.
	waitFor(t, c, wid, "step 2's ppo_step", 8*time.Minute, training(2))
	w.Kill9(t)
	time.Sleep(time.Second)
	w.Start(t)
	// 3. Temporal stops while step 3's rollouts run, and comes back.
	waitFor(t, c, wid, "step 3's rollouts", 8*time.Minute, rolloutsRunning(3))
	srv.Stop()
	time.Sleep(3 * time.Second)
	if err := srv.Start(); err != nil {
		t.Fatalf("restart the dev server: %v", err)
	}
	// 4. The trainer process dies during step 4's update.
	waitFor(t, c, wid, "step 4's ppo_step", 8*time.Minute, training(4))
	pid := trainerPID(t, home)
	syscall.Kill(-pid, syscall.SIGKILL)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &res); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	s := res.State
	if s.Phase != workflows.PhaseDone || s.Step != 4 || len(s.Steps) != 4 {
		t.Fatalf("campaign ended in phase %s at step %d with %d step records", s.Phase, s.Step, len(s.Steps))
	}
	// Each step trained exactly once; steps 2 and 4 were interrupted and redone.
	log := readFile(opsLog)
	for step := 1; step <= 4; step++ {
		key := fmt.Sprintf("%s/%s/ppo/%d", name, s.Epoch, step)
		if n := strings.Count(log, "commit ppo_step "+key+" "); n != 1 {
			t.Errorf("step %d committed %d times", step, n)
		}
		if begins := strings.Count(log, "begin ppo_step "+key+"\n"); (step == 2 || step == 4) && begins < 2 {
			t.Errorf("step %d began %d times: the crash did not land inside it", step, begins)
		}
	}
	if t.Failed() {
		t.Logf("ops.log:\n%s", log)
	}
	// No rollout lost, failed, stale or counted twice: every step trained on
	// exactly one rollout per task, each run as one workflow execution.
	versions := map[string]bool{}
	for _, r := range s.Steps {
		if r.Rollouts != cfg.PPO.TasksPerStep || r.Trained != r.Rollouts || r.Aborted+r.Failed+r.Stale != 0 {
			t.Errorf("step %d: %d rollouts, %d trained, aborted %d, failed %d, stale %d", r.Step, r.Rollouts, r.Trained, r.Aborted, r.Failed, r.Stale)
		}
		if versions[r.PolicyVersion] {
			t.Errorf("step %d sampled with %s, as an earlier step did: inference did not get the new weights", r.Step, r.PolicyVersion)
		}
		versions[r.PolicyVersion] = true
		n, err := c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s' AND Stage = 'ppo' AND Step = %d", name, r.Step)})
		if err != nil {
			t.Fatal(err)
		}
		if n.Count != int64(cfg.PPO.TasksPerStep) {
			t.Errorf("step %d: %d rollout executions for %d tasks", r.Step, n.Count, cfg.PPO.TasksPerStep)
		}
	}
	if left := testenv.Containers(t, sandbox.LabelHost, host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// waitFor polls cond, failing at once if the campaign stops running (a
// campaign that failed never reaches the next fault).
func waitFor(t *testing.T, c client.Client, wid, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	lastCheck := time.Now()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if time.Since(lastCheck) > 2*time.Second {
			lastCheck = time.Now()
			d, err := c.DescribeWorkflowExecution(context.Background(), wid, "")
			if err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				var res workflows.CampaignResult
				err := c.GetWorkflow(context.Background(), wid, "").Get(context.Background(), &res)
				t.Fatalf("waiting for %s, the campaign ended %s: %v", what, d.WorkflowExecutionInfo.Status, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func trainerPID(t *testing.T, home string) int {
	t.Helper()
	var pid int
	if _, err := fmt.Sscan(readFile(filepath.Join(home, "gpu", "trainer.pid")), &pid); err != nil || pid <= 1 {
		t.Fatalf("trainer pid file: %v", err)
	}
	return pid
}
