package workflows_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// chaosFault is one crash of the chaos test: when at holds, wait a random
// offset of up to jitter, then kill the worker's process groups (or restart
// the dev server) and start it again.
type chaosFault struct {
	stage  string
	at     func() bool
	jitter time.Duration
	server bool // restart the dev server instead of killing the worker
}

// chaosRig is a chaos test's dev server, store, worker process and seeded
// fault offsets (T1FLOW_CHAOS_SEED replays a run).
type chaosRig struct {
	rng   *rand.Rand
	began time.Time
	srv   *testenv.RestartableServer
	c     client.Client
	home  string
	host  string
	w     *testenv.WorkerProcess
}

func newChaosRig(t *testing.T, hostPrefix string) *chaosRig {
	seed := time.Now().UnixNano()
	if s := os.Getenv("T1FLOW_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("T1FLOW_CHAOS_SEED = %q: %v", s, err)
		}
	}
	t.Logf("chaos seed %d (T1FLOW_CHAOS_SEED=%d replays it)", seed, seed)
	r := &chaosRig{rng: rand.New(rand.NewSource(seed)), began: time.Now()}
	r.srv, r.c = testenv.RestartableDevServer(t)
	testenv.Docker(t)
	r.home = t.TempDir()
	st, err := store.NewLocal(filepath.Join(r.home, "store"))
	if err != nil {
		t.Fatal(err)
	}
	r.host = testenv.HostName(hostPrefix)
	chaosPools(t, st)
	r.w = testenv.StartWorkerProcess(t, &testenv.WorkerProcess{
		Home: r.home,
		Args: []string{"-role", "all", "-host", r.host, "-gpus", "cpu", "-inference-args", "--threads 1",
			"-trainer-args", "--threads 1 --slow-ms 300", "-reaper-interval", "1h"},
		Env: []string{"TEMPORAL_ADDRESS=" + r.srv.Address, "T1FLOW_STORE=" + filepath.Join(r.home, "store")},
	})
	return r
}

// inject waits for each fault's stage of campaign wid, then, at a seeded
// offset within its jitter, kills the worker's process groups with SIGKILL
// and restarts it, or restarts the dev server.
func (r *chaosRig) inject(t *testing.T, wid string, faults []chaosFault) {
	for _, f := range faults {
		waitFor(t, r.c, wid, f.stage, 6*time.Minute, f.at)
		off := time.Duration(r.rng.Int63n(int64(f.jitter) + 1))
		time.Sleep(off)
		t.Logf("%5.1fs: %s (+%s): %s", time.Since(r.began).Seconds(), f.stage, off.Round(time.Millisecond), map[bool]string{true: "restart the dev server", false: "kill -9 the worker's process groups"}[f.server])
		if f.server {
			r.srv.Stop()
			time.Sleep(2 * time.Second)
			if err := r.srv.Start(); err != nil {
				t.Fatalf("restart the dev server: %v", err)
			}
			continue
		}
		r.w.KillGroup9(t)
		time.Sleep(500 * time.Millisecond)
		r.w.Start(t)
	}
}

// TestCampaignChaos runs a small campaign (SFT, critic warm-up, three PPO
// steps, the second started ahead while the first trains (max_staleness 1),
// a continue-as-new, checkpoints loaded into inference, an eval) on a worker process
// (control, sandbox and gpu roles, with the reference trainer and inference
// server as its children) and kills the worker's process groups with SIGKILL
// in every stage, at seeded random offsets (T1FLOW_CHAOS_SEED replays a
// run), restarting it each time, and restarts the dev server once. The
// campaign must complete with every trainer key committed exactly once, every
// rollout the config asked for run as one execution and counted once, and no
// sandbox left.
func TestCampaignChaos(t *testing.T) {
	// Beside TestCampaignChaosOversample (each has its own dev server, store,
	// worker process and host label): both wait mostly on restarts and the
	// trainer's slow-ms, and together they were 13 of make test's minutes.
	t.Parallel()
	r := newChaosRig(t, "chaos")
	c, home, host := r.c, r.home, r.host

	name := fmt.Sprintf("x%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.Eval.Base, cfg.Eval.AtEnd = false, true
	cfg.SFT.Minibatches, cfg.CriticWarmup.FitEpochs = 1, 1
	// Step 2's rollouts start while step 1 trains (max_staleness 1); the
	// campaign continues as new after step 2, and step 3 runs after it.
	cfg.PPO.Steps, cfg.PPO.ContinueAsNewEvery, cfg.PPO.MaxStaleness = 3, 2, 1
	wid := ids.CampaignWorkflowID(name)
	startCampaign(t, c, cfg)
	faults := chaosFaults(t, c, wid, name, host, filepath.Join(home, "gpu"))
	r.inject(t, wid, faults)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &res); err != nil {
		explainCampaign(t, c, name)
		t.Fatalf("campaign: %v", err)
	}
	t.Logf("campaign done after %.0fs; the inference watchdog found %d hangs", time.Since(r.began).Seconds(),
		strings.Count(readFile(filepath.Join(home, "logs", "inference.log")), " hung: "))
	checkChaosOutcome(t, c, cfg, res.State, readFile(filepath.Join(home, "gpu", "trainer", "ops.log")))
	checkAhead(t, res.State)
	recordRun(t, c, wid, firstRun(t, c, wid), "testdata/campaign_ahead.json")
	recordHistory(t, c, ids.PPOStepWorkflowID(name, 2), "testdata/ppo_ahead.json")
	if left := testenv.Containers(t, sandbox.LabelHost, host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

// chaosPools: both example tasks train, one of them evaluates.
func chaosPools(t *testing.T, st store.Store) {
	t.Helper()
	ctx := context.Background()
	var refs []task.Ref
	for _, d := range []string{"../examples/tasks/log-level-counter", "../examples/tasks/sort-photos-by-date"} {
		ts, err := task.LoadAll(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			ref, err := task.Bundle(ctx, st, tk)
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
	}
	if _, _, err := task.ImportRefs(ctx, st, "train", refs); err != nil {
		t.Fatal(err)
	}
	if _, _, err := task.ImportRefs(ctx, st, "evalset", refs[:1]); err != nil {
		t.Fatal(err)
	}
}

// chaosFaults are the crashes, one or more in each stage of the campaign,
// each found from the campaign's status query or the trainer's ops.log.
func chaosFaults(t *testing.T, c client.Client, wid, name, host, gpuDir string) []chaosFault {
	opsLog := filepath.Join(gpuDir, "trainer", "ops.log")
	// A query waits on a workflow worker; just after a kill or the dev
	// server's restart that can take long enough for a short stage (the final
	// eval) to pass unseen, so each is bounded and the local signs go first.
	status := func() workflows.CampaignStatus {
		var s workflows.CampaignStatus
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus); err == nil {
			v.Get(&s)
		}
		return s
	}
	sandboxes := func() bool { return len(testenv.Containers(t, sandbox.LabelHost, host)) > 0 }
	// op running: a key of the campaign ending in keyEnd begun in ops.log, not committed.
	running := func(op, keyEnd string) func() bool {
		begin := regexp.MustCompile(fmt.Sprintf(`begin %s %s/\S*%s\n`, op, name, regexp.QuoteMeta(keyEnd)))
		commit := regexp.MustCompile(fmt.Sprintf(`commit %s %s/\S*%s `, op, name, regexp.QuoteMeta(keyEnd)))
		return func() bool { l := readFile(opsLog); return begin.MatchString(l) && !commit.MatchString(l) }
	}
	committed := func(op, keyEnd string) func() bool {
		commit := regexp.MustCompile(fmt.Sprintf(`commit %s %s/\S*%s `, op, name, regexp.QuoteMeta(keyEnd)))
		return func() bool { return commit.MatchString(readFile(opsLog)) }
	}
	// The trainer saved the checkpoint; inference does not serve it yet.
	saved := func(label string) func() bool {
		return func() bool {
			// Stored, a save moves to fetched/ for the load (gpu/retention.go).
			m, _ := filepath.Glob(filepath.Join(gpuDir, "checkpoints", "*"+label+"*", "manifest.json"))
			f, _ := filepath.Glob(filepath.Join(gpuDir, "checkpoints", "fetched", "*"+label+"*", "manifest.json"))
			return len(m)+len(f) > 0 && !strings.Contains(readFile(filepath.Join(gpuDir, "inference.served.json")), label)
		}
	}
	inFlight := func(what string, rollouts bool) func() bool {
		return func() bool { return status().InFlight == what && (!rollouts || sandboxes()) }
	}
	ppoRollouts := func(step int) func() bool {
		upd := running("ppo_step", fmt.Sprintf("/ppo/%d", step))
		return func() bool { return inFlight(fmt.Sprintf("ppo step %d", step), true)() && !upd() }
	}
	ms := time.Millisecond
	// The last PPO step (3) is what inference serves.
	lastServed := func() bool {
		return strings.Contains(readFile(filepath.Join(gpuDir, "inference.served.json")), "step-0003")
	}
	sftEpochSaved := func() bool {
		return running("sft", "/sft/0")() && strings.Contains(readFile(opsLog), "/sft/0 epoch 1/2 saved")
	}
	return []chaosFault{
		// After SFT saved its first epoch: the retry resumes from it.
		{stage: "SFT update, epoch 2", at: sftEpochSaved, jitter: 200 * ms},
		{stage: "warm-up rollouts", at: inFlight("critic warm-up", true), jitter: 3000 * ms},
		{stage: "PPO step 1 rollouts", at: ppoRollouts(1), jitter: 3000 * ms},
		// Step 1 trains while step 2's rollouts run, started ahead: both die.
		// Seen from the server (a status query can time out at high load);
		// if step 1 has ended before the window was seen, the kill lands
		// after it (checkAhead still checks step 2 ran ahead).
		{stage: "PPO step 2 rollouts started ahead, step 1 update", at: func() bool {
			return wfRunning(c, ids.PPOStepWorkflowID(name, 2)) && (wfRunning(c, ids.PPOStepWorkflowID(name, 1)) && sandboxes() || wfClosed(c, ids.PPOStepWorkflowID(name, 1)))
		}, jitter: 1000 * ms},
		// Committed, its reply not yet sent (--slow-ms delays it): the retry replays the step.
		{stage: "PPO step 1 update", at: committed("ppo_step", "/ppo/1"), jitter: 50 * ms},
		{stage: "PPO step 1 checkpoint load into inference", at: saved("step-0001"), jitter: 300 * ms},
		{stage: "PPO step 3 rollouts", at: ppoRollouts(3), jitter: 3000 * ms, server: true},
		// Either sign will do: the status query can miss the final eval's
		// short window (on a quiet machine it ran out within the dev server's
		// restart above), and once the last step's checkpoint is served every
		// sandbox of this host is the final eval's.
		{stage: "final eval rollouts", at: func() bool { return lastServed() && sandboxes() || inFlight("eval final", true)() }, jitter: 2000 * ms},
	}
}

// checkChaosOutcome: the campaign completed, every trainer key committed
// once, every rollout the config asked for run once and counted once.
func checkChaosOutcome(t *testing.T, c client.Client, cfg campaign.Config, s workflows.CampaignState, opsLog string) {
	t.Helper()
	if s.Phase != workflows.PhaseDone || s.Step != cfg.PPO.Steps || len(s.Steps) != cfg.PPO.Steps {
		t.Fatalf("campaign ended in phase %s at step %d with %d step records", s.Phase, s.Step, len(s.Steps))
	}
	commits := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m) commit (\S+) (\S+) version=`).FindAllStringSubmatch(opsLog, -1) {
		if strings.HasPrefix(m[2], cfg.Name+"/") {
			commits[m[1]+" "+m[2]]++
		}
	}
	for k, n := range commits {
		if n != 1 {
			t.Errorf("%s committed %d times", k, n)
		}
	}
	want := []string{"sft " + cfg.Name + "/" + s.Epoch + "/sft/0"}
	for step := 1; step <= cfg.PPO.Steps; step++ {
		want = append(want, fmt.Sprintf("ppo_step %s/%s/ppo/%d", cfg.Name, s.Epoch, step))
	}
	for _, k := range want {
		if commits[k] != 1 {
			t.Errorf("%s committed %d times", k, commits[k])
		}
	}
	// SFT was killed after saving its first epoch: begun again, it went on from there.
	sftKey := cfg.Name + "/" + s.Epoch + "/sft/0"
	if strings.Count(opsLog, "begin sft "+sftKey+"\n") > 1 && !strings.Contains(opsLog, "resume sft "+sftKey+" after epoch 1/2") {
		t.Errorf("SFT begun again after its first epoch was saved did not resume from it")
	}
	t.Logf("trainer keys committed: %d; retries answered from their record: %d", len(commits), strings.Count(opsLog, " replay "))
	if t.Failed() {
		t.Logf("ops.log:\n%s", opsLog)
	}
	if s.Aborted+s.Failed+s.Stale != 0 {
		t.Errorf("campaign counted aborted %d, failed %d, stale %d", s.Aborted, s.Failed, s.Stale)
	}
	for _, r := range s.Steps {
		if r.Rollouts != cfg.PPO.TasksPerStep || r.Trained != r.Rollouts || r.Aborted+r.Failed+r.Stale != 0 {
			t.Errorf("step %d: %d rollouts, %d trained, aborted %d, failed %d, stale %d", r.Step, r.Rollouts, r.Trained, r.Aborted, r.Failed, r.Stale)
		}
		if n, distinct := rolloutExecutions(t, c, fmt.Sprintf("CampaignID = '%s' AND Stage = 'ppo' AND Step = %d", cfg.Name, r.Step)); n != cfg.PPO.TasksPerStep || distinct != n {
			t.Errorf("step %d: %d rollout executions of %d rollout IDs for %d tasks", r.Step, n, distinct, cfg.PPO.TasksPerStep)
		}
	}
	// Warm-up: every rollout ID run as one execution.
	if n, distinct := rolloutExecutions(t, c, fmt.Sprintf("CampaignID = '%s' AND Stage = 'warmup'", cfg.Name)); n == 0 || n != distinct {
		t.Errorf("warm-up: %d rollout executions of %d rollout IDs", n, distinct)
	}
	var labels []string
	for _, e := range s.Evals {
		labels = append(labels, e.Label)
		sweep := ids.CampaignEvalSweepID(cfg.Name, e.Label)
		if e.Summary.Rollouts != 1 {
			t.Errorf("eval %s: %d rollouts of 1 task", e.Label, e.Summary.Rollouts)
		}
		if n, distinct := rolloutExecutions(t, c, fmt.Sprintf("CampaignID = '%s'", sweep)); n != 1 || distinct != 1 {
			t.Errorf("eval %s: %d rollout executions of %d rollout IDs for 1 task", e.Label, n, distinct)
		}
	}
	if strings.Join(labels, ",") != "sft,final" {
		t.Errorf("evals %v, want sft,final", labels)
	}
}

// rolloutExecutions counts the rollout executions a query finds and their
// distinct workflow IDs, and logs the sandboxes their crashes cost.
func rolloutExecutions(t *testing.T, c client.Client, query string) (n, distinct int) {
	t.Helper()
	seen := map[string]bool{}
	extra, lost := 0, 0
	defer func() { t.Logf("%s: %d rollouts, %d extra sandboxes, %d lost turns", query, n, extra, lost) }()
	var token []byte
	for {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = 'RolloutWorkflow' AND " + query, NextPageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.Executions {
			n++
			seen[e.Execution.WorkflowId] = true
			var r workflows.RolloutResult
			if err := c.GetWorkflow(context.Background(), e.Execution.WorkflowId, e.Execution.RunId).Get(context.Background(), &r); err == nil {
				extra, lost = extra+max(r.SandboxAttempts-1, 0), lost+r.LostTurns
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return n, len(seen)
		}
	}
}

// checkAhead: step 2 was started ahead (while the campaign waited for step
// 1, which trained after collecting) and trained on the version step 1's update made,
// its rollouts at most one version behind; step 3, after the
// continue-as-new, was not.
func checkAhead(t *testing.T, s workflows.CampaignState) {
	t.Helper()
	if len(s.Steps) != 3 {
		return // checkChaosOutcome said why
	}
	s1, s2, s3 := s.Steps[0], s.Steps[1], s.Steps[2]
	v1, _ := gpu.VersionOf(s1.PolicyVersion)
	if !s2.Ahead || s2.PolicyVersion != fmt.Sprintf("v%d", v1+1) || len(s2.Staleness) > 2 {
		t.Errorf("step 2: ahead %v on %s (step 1 on %s), staleness %v: want started ahead, on the next version, at most one behind",
			s2.Ahead, s2.PolicyVersion, s1.PolicyVersion, s2.Staleness)
	}
	if s1.Ahead || s3.Ahead {
		t.Errorf("steps 1 and 3 started ahead: %v %v (step 3 follows a continue-as-new)", s1.Ahead, s3.Ahead)
	}
	t.Logf("step 2 started ahead: collected in %.1f s, waited %.1f s for step 1 (trained in %.1f s); staleness %v", s2.CollectSeconds, s2.WaitSeconds, s1.TrainSeconds, s2.Staleness)
}

// firstRun is the run ID of a workflow's first run.
func firstRun(t *testing.T, c client.Client, wid string) string {
	t.Helper()
	d, err := c.DescribeWorkflowExecution(context.Background(), wid, "")
	if err != nil {
		t.Fatal(err)
	}
	return d.WorkflowExecutionInfo.GetFirstRunId()
}

func describeStatus(c client.Client, wid string) enumspb.WorkflowExecutionStatus {
	d, err := c.DescribeWorkflowExecution(context.Background(), wid, "")
	if err != nil {
		return enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED
	}
	return d.WorkflowExecutionInfo.Status
}

func wfRunning(c client.Client, wid string) bool {
	return describeStatus(c, wid) == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// wfClosed: the workflow ran and is no longer running.
func wfClosed(c client.Client, wid string) bool {
	s := describeStatus(c, wid)
	return s != enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED && s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}
