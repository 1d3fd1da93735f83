package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

func smallCampaign(t *testing.T, name string) campaign.Config {
	t.Helper()
	cfg, err := campaign.Parse("test.toml", fmt.Sprintf(`
name = %q
[pools]
train = "train"
eval = ["evalset"]
[policy]
harness = "short"
max_new_tokens = 24
preset = "small"
[sft]
enabled = true
epochs = 2
[critic_warmup]
fit_epochs = 3
ev_gate = -1000.0
require_gate = false
[ppo]
steps = 2
tasks_per_step = 2
concurrency = 2
turn_cap = 2
max_failed_share = 0.5
continue_as_new_every = 1
[eval]
turn_cap = 2
every = 0
`, name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startCampaign starts a campaign workflow on the control queue.
func startCampaign(t *testing.T, c client.Client, cfg campaign.Config) client.WorkflowRun {
	t.Helper()
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: ids.CampaignWorkflowID(cfg.Name), TaskQueue: ids.ControlQueue},
		workflows.CampaignWorkflow, workflows.CampaignInput{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func (r *rig) pools(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/sort-photos-by-date")
	for _, p := range []string{"train", "evalset"} {
		if _, _, err := task.ImportRefs(ctx, r.st, p, refs); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCampaignEndToEndWithTrainerCrash(t *testing.T) {
	r := newRig(t, true)
	home := t.TempDir()
	l := testenv.GPUWorker(t, r.c, r.st, home)
	r.pools(t)
	name := fmt.Sprintf("c%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	run := startCampaign(t, r.c, cfg)
	// Kill the trainer process in the middle of the first PPO step.
	killed := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			p, err := l.Acts.Trainer.Progress(context.Background())
			if err == nil && p.Op != nil && *p.Op == "ppo_step" {
				l.Trainer.Kill()
				killed <- true
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		killed <- false
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := run.Get(ctx, &res); err != nil {
		r.explain(t, name)
		t.Fatal(err)
	}
	st := res.State
	if st.Phase != workflows.PhaseDone || st.Step != 2 || len(st.Steps) != 2 || st.Runs < 2 {
		t.Fatalf("campaign state: phase %s, step %d, %d step records, %d runs", st.Phase, st.Step, len(st.Steps), st.Runs)
	}
	for _, s := range st.Steps {
		if s.Trained < 1 || s.Metrics["policy_loss"] == nil || s.Rollouts != 2 || s.Stale != 0 {
			t.Errorf("step %d: %+v", s.Step, s)
		}
	}
	if st.Steps[0].PolicyVersion == st.Steps[1].PolicyVersion {
		t.Errorf("both steps sampled with policy %s: inference was not updated", st.Steps[0].PolicyVersion)
	}
	var labels []string
	for _, e := range st.Evals {
		labels = append(labels, e.Label)
		if e.Summary.Rollouts != 2 {
			t.Errorf("eval %s: %d rollouts", e.Label, e.Summary.Rollouts)
		}
	}
	if strings.Join(labels, ",") != "base,sft,final" || st.ColdEV == nil {
		t.Errorf("evals %v, cold EV %v", labels, st.ColdEV)
	}
	if !<-killed {
		t.Fatal("the trainer was never caught in a PPO step")
	}
	if l.Trainer.Restarts() < 1 {
		t.Fatal("the trainer was killed but not restarted")
	}
	// Each step trained exactly once, even with the crash.
	log, _ := os.ReadFile(filepath.Join(home, "gpu", "trainer", "ops.log"))
	for step := 1; step <= 2; step++ {
		if n := strings.Count(string(log), fmt.Sprintf("commit ppo_step %s/%s/ppo/%d ", name, st.Epoch, step)); n != 1 {
			t.Errorf("step %d committed %d times:\n%s", step, n, log)
		}
	}
	if !strings.Contains(string(log), fmt.Sprintf("begin ppo_step %s/%s/ppo/1", name, st.Epoch)) {
		t.Errorf("no trace of the interrupted step in ops.log:\n%s", log)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

func TestCampaignPauseResumeAndStatus(t *testing.T) {
	r := newRig(t, true)
	testenv.GPUWorker(t, r.c, r.st, t.TempDir())
	r.pools(t)
	name := fmt.Sprintf("p%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.SFT.Enabled, cfg.Eval.Base, cfg.Eval.AtEnd = false, false, false
	wid := ids.CampaignWorkflowID(name)
	run := startCampaign(t, r.c, cfg)
	firstRun := run.GetRunID() // run.Get follows continue-as-new to the last
	ctx := context.Background()
	h, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: workflows.UpdatePause, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	var s workflows.CampaignStatus
	if err := h.Get(ctx, &s); err != nil || !s.Paused {
		t.Fatalf("pause: %+v %v", s, err)
	}
	bad, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: workflows.UpdateSetConcurrency, Args: []any{0}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = bad.Get(ctx, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "must be between 1 and 1024") {
		t.Errorf("set_concurrency 0 must be rejected, got %v", err)
	}
	// While paused, the campaign finishes what it was doing and then waits.
	time.Sleep(8 * time.Second)
	v, err := r.c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus)
	if err != nil {
		t.Fatal(err)
	}
	v.Get(&s)
	stepWhilePaused := s.Step
	time.Sleep(5 * time.Second)
	v, _ = r.c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus)
	v.Get(&s)
	if s.Step != stepWhilePaused || !s.Paused {
		t.Fatalf("a paused campaign kept stepping: %d then %d", stepWhilePaused, s.Step)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 && s.InFlight == "" {
		t.Errorf("a paused campaign left sandboxes running: %v", left)
	}
	if _, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: workflows.UpdateResume, WaitForStage: client.WorkflowUpdateStageCompleted}); err != nil {
		t.Fatal(err)
	}
	r.setConcurrencyMidStep(t, name, 3)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := run.Get(cctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.State.Step != 2 || res.State.Phase != workflows.PhaseDone || res.State.Concurrency != 3 {
		t.Fatalf("after resume: %+v", res.State)
	}
	// continue_as_new_every = 1: the first run continued as new, the last was started by it.
	recordRun(t, r.c, wid, firstRun, "testdata/campaign_continued_as_new.json")
	recordHistory(t, r.c, wid, "testdata/campaign_after_continue.json")
}

// setConcurrencyMidStep sets a campaign's concurrency while a PPO step runs
// and checks that the running step's window took it (its progress query).
func (r *rig) setConcurrencyMidStep(t *testing.T, name string, n int) {
	t.Helper()
	st := r.awaitStatus(t, name, 5*time.Minute, "a PPO step in flight", func(s workflows.CampaignStatus) bool { return strings.HasPrefix(s.InFlight, "ppo step") })
	ctx := context.Background()
	h, err := r.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: ids.CampaignWorkflowID(name), UpdateName: workflows.UpdateSetConcurrency, Args: []any{n}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var s workflows.CampaignStatus
	if err == nil {
		err = h.Get(ctx, &s)
	}
	if err != nil || s.Concurrency != n {
		t.Fatalf("set_concurrency %d: %+v %v", n, s, err)
	}
	var step int
	fmt.Sscanf(st.InFlight, "ppo step %d", &step)
	child := ids.PPOStepWorkflowID(name, step)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var p workflows.Progress
		v, err := r.c.QueryWorkflow(ctx, child, "", workflows.QueryProgress)
		if err == nil && v.Get(&p) == nil && p.Concurrency == n {
			recordHistory(t, r.c, child, "testdata/ppo_set_concurrency.json")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never took concurrency %d: %+v %v", child, n, p, err)
		}
	}
}

// explain prints the campaign's workflows and their failures.
func (r *rig) explain(t *testing.T, campaignName string) { explainCampaign(t, r.c, campaignName) }

// explainCampaign prints campaignName's workflows, and what each one still
// open waits on: its pending activities (state, attempt, when scheduled and
// last started, the last failure) and children.
func explainCampaign(t *testing.T, c client.Client, campaignName string) {
	resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("CampaignID STARTS_WITH '%s'", campaignName), PageSize: 200})
	if err != nil {
		t.Log(err)
		return
	}
	for _, e := range resp.Executions {
		t.Logf("%s %s %s", e.Type.Name, e.Execution.WorkflowId, e.Status)
		if e.Status.String() == "Completed" {
			continue
		}
		d, err := c.DescribeWorkflowExecution(context.Background(), e.Execution.WorkflowId, e.Execution.RunId)
		if err != nil {
			continue
		}
		for _, a := range d.PendingActivities {
			t.Logf("  pending %s %s attempt %d, scheduled %s, last started %s: %v", a.ActivityType.Name, a.State, a.Attempt,
				a.ScheduledTime.AsTime().Format(time.TimeOnly), a.LastStartedTime.AsTime().Format(time.TimeOnly), a.LastFailure)
		}
		for _, ch := range d.PendingChildren {
			t.Logf("  child %s %s", ch.WorkflowTypeName, ch.WorkflowId)
		}
	}
}

func TestCampaignCancelLeavesNoSandboxOrPartialCheckpoint(t *testing.T) {
	r := newRig(t, true)
	home := t.TempDir()
	testenv.GPUWorker(t, r.c, r.st, home)
	r.pools(t)
	name := fmt.Sprintf("x%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.SFT.Enabled, cfg.Eval.Base, cfg.Eval.AtEnd = false, false, false
	wid := ids.CampaignWorkflowID(name)
	run := startCampaign(t, r.c, cfg)
	// Cancel while rollouts hold sandboxes.
	deadline := time.Now().Add(5 * time.Minute)
	for len(testenv.Containers(t, sandbox.LabelHost, r.host)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox ever ran")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := r.c.CancelWorkflow(context.Background(), wid, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run.Get(ctx, nil); err == nil {
		t.Fatal("a cancelled campaign should end cancelled")
	}
	for {
		left := testenv.Containers(t, sandbox.LabelHost, r.host)
		if len(left) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("sandboxes left after cancel: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Checkpoints are written to a temp directory and renamed: none is half-written.
	tmp, _ := filepath.Glob(filepath.Join(home, "gpu", "checkpoints", "*", "*.tmp"))
	more, _ := filepath.Glob(filepath.Join(home, "gpu", "checkpoints", "*.tmp"))
	if len(tmp)+len(more) != 0 {
		t.Fatalf("half-written checkpoints: %v %v", tmp, more)
	}
}
