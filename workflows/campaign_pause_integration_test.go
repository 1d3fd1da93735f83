package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

// status queries a campaign.
func (r *rig) status(t *testing.T, name string) workflows.CampaignStatus {
	t.Helper()
	var s workflows.CampaignStatus
	v, err := r.c.QueryWorkflow(context.Background(), ids.CampaignWorkflowID(name), "", workflows.QueryStatus)
	if err == nil {
		err = v.Get(&s)
	}
	if err != nil {
		t.Logf("status %s: %v", name, err)
	}
	return s
}

// awaitStatus polls a campaign's status until ok, or fails after limit.
func (r *rig) awaitStatus(t *testing.T, name string, limit time.Duration, what string, ok func(workflows.CampaignStatus) bool) workflows.CampaignStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := r.status(t, name)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			r.explain(t, name)
			t.Fatalf("campaign %s: %s never happened; status %+v", name, what, s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (r *rig) decide(t *testing.T, name, update string) {
	t.Helper()
	h, err := r.c.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{WorkflowID: ids.CampaignWorkflowID(name), UpdateName: update,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(context.Background(), nil)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", update, name, err)
	}
}

func (r *rig) cancelCampaign(t *testing.T, run client.WorkflowRun) {
	t.Helper()
	if err := r.c.CancelWorkflow(context.Background(), run.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run.Get(ctx, nil); err == nil {
		t.Fatalf("%s: a cancelled campaign ended without error", run.GetID())
	}
}

// modelSHA is the sha256 of a stored checkpoint's actor weights.
func (r *rig) modelSHA(t *testing.T, name string) string {
	t.Helper()
	ck, err := gpu.FindCheckpoint(context.Background(), r.st, name)
	if err != nil {
		t.Fatal(err)
	}
	return ck.Files["model.safetensors"].SHA256
}

// TestCampaignsOnOneTrainerNeverShareWeights runs two campaigns on one
// trainer. Side by side: the second, started while the first trains, pauses
// at its init (TrainerBusy, naming the holder) instead of loading weights
// under it. In a row: once the first (which trained SFT) is cancelled, retry
// loads the second's configured init (random, seed 3), so its "init"
// checkpoint is the same weights as the first's init, not the first's SFT
// weights (before campaign isolation it was those), and inference serves it.
func TestCampaignsOnOneTrainerNeverShareWeights(t *testing.T) {
	r := newRig(t, true)
	home := t.TempDir()
	l := testenv.GPUWorker(t, r.c, r.st, home)
	r.pools(t)
	stamp := time.Now().UnixNano() % 1e9
	a, b := smallCampaign(t, fmt.Sprintf("ia%d", stamp)), smallCampaign(t, fmt.Sprintf("ib%d", stamp))
	a.Eval.Base, a.Eval.AtEnd, a.Policy.Seed = false, false, 3
	b.Eval.Base, b.Eval.AtEnd, b.SFT.Enabled, b.Policy.Seed = false, false, false, 3
	runA := startCampaign(t, r.c, a)
	sa := r.awaitStatus(t, a.Name, 5*time.Minute, "first campaign's init", func(s workflows.CampaignStatus) bool { return strings.HasSuffix(s.Checkpoint, "/init") })
	initA := sa.Checkpoint

	runB := startCampaign(t, r.c, b)
	sb := r.awaitStatus(t, b.Name, 3*time.Minute, "second campaign paused at its init", func(s workflows.CampaignStatus) bool { return s.Failure != nil })
	if sb.Failure.Stage != "init" || sb.Failure.Type != "TrainerBusy" || !strings.Contains(sb.Failure.Reason, a.Name) || !sb.Paused {
		t.Fatalf("side by side: the second campaign's failure %+v, want init TrainerBusy naming %s", sb.Failure, a.Name)
	}
	d, err := r.c.DescribeWorkflowExecution(context.Background(), runB.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if sa := d.WorkflowExecutionInfo.SearchAttributes.String(); !strings.Contains(sa, "paused:TrainerBusy") {
		t.Errorf("search attributes of the paused campaign lack Outcome paused:TrainerBusy: %s", sa)
	}

	sa = r.awaitStatus(t, a.Name, 10*time.Minute, "first campaign's SFT checkpoint", func(s workflows.CampaignStatus) bool { return strings.HasSuffix(s.Checkpoint, "/sft") })
	sftA := sa.Checkpoint
	r.cancelCampaign(t, runA)
	r.decide(t, b.Name, workflows.UpdateRetry)
	sb = r.awaitStatus(t, b.Name, 3*time.Minute, "second campaign's init", func(s workflows.CampaignStatus) bool { return strings.HasSuffix(s.Checkpoint, "/init") })
	info, err := l.Acts.Inference.ModelInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r.cancelCampaign(t, runB)

	if r.modelSHA(t, initA) == r.modelSHA(t, sftA) {
		t.Fatalf("the first campaign's SFT left its init's weights unchanged: nothing to tell apart")
	}
	if got, want := r.modelSHA(t, sb.Checkpoint), r.modelSHA(t, initA); got != want {
		t.Errorf("the second campaign's init %s is not its configured init (random, seed 3) = %s", sb.Checkpoint, initA)
		if got == r.modelSHA(t, sftA) {
			t.Errorf("it is the first campaign's SFT weights %s", sftA)
		}
	}
	if info.WeightVersion != sb.WeightVersion || sb.WeightVersion != "v0" {
		t.Errorf("inference serves %s, the second campaign's init is %s (want v0)", info.WeightVersion, sb.WeightVersion)
	}
	log, _ := os.ReadFile(filepath.Join(home, "gpu", "trainer", "ops.log"))
	if n := strings.Count(string(log), "init random seed=3"); n != 2 {
		t.Errorf("ops.log has %d inits of seed 3, want 2 (one per campaign):\n%s", n, log)
	}
	// The second campaign was cancelled as its warm-up started its
	// rollouts: none may run on (they are started ABANDON).
	r.noRolloutRunsOn(t, a.Name, b.Name)
}

// noRolloutRunsOn waits (2 minutes at most) until no rollout workflow of
// the campaigns is running.
func (r *rig) noRolloutRunsOn(t *testing.T, campaigns ...string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		resp, err := r.c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = 'RolloutWorkflow' AND ExecutionStatus = 'Running'", PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		left = nil
		for _, e := range resp.Executions {
			for _, c := range campaigns {
				if strings.HasPrefix(e.Execution.WorkflowId, "rollout/"+c) {
					left = append(left, e.Execution.WorkflowId)
				}
			}
		}
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("rollouts of cancelled campaigns still running: %v", left)
}

// TestCampaignWarmupGatePausesRetryAndSkip: a warm-up gate no critic can
// reach (EV 1.0) pauses the campaign (status, details, search attribute);
// retry runs a new warm-up under its own trainer keys, which pauses again;
// skip goes on to PPO, and the campaign completes with each key trained once.
func TestCampaignWarmupGatePausesRetryAndSkip(t *testing.T) {
	r := newRig(t, true)
	home := t.TempDir()
	testenv.GPUWorker(t, r.c, r.st, home)
	r.pools(t)
	name := fmt.Sprintf("g%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.SFT.Enabled, cfg.Eval.Base, cfg.Eval.AtEnd = false, false, false
	cfg.CriticWarmup.EVGate, cfg.CriticWarmup.RequireGate, cfg.PPO.Steps = 1.0, true, 1
	run := startCampaign(t, r.c, cfg)
	paused := func(retries int) func(workflows.CampaignStatus) bool {
		return func(s workflows.CampaignStatus) bool { return s.Failure != nil && s.Retries["warmup"] == retries }
	}
	s := r.awaitStatus(t, name, 10*time.Minute, "pause on the warm-up gate", paused(0))
	if s.Failure.Stage != "warmup" || s.Failure.Type != "WarmupGate" || !s.Paused || s.Phase != workflows.PhaseWarmup {
		t.Fatalf("paused on %+v in phase %s, want warmup WarmupGate", s.Failure, s.Phase)
	}
	d, err := r.c.DescribeWorkflowExecution(context.Background(), run.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if sa := d.WorkflowExecutionInfo.SearchAttributes.String(); !strings.Contains(sa, "paused:WarmupGate") {
		t.Errorf("search attributes lack Outcome paused:WarmupGate: %s", sa)
	}
	r.decide(t, name, workflows.UpdateRetry)
	s = r.awaitStatus(t, name, 10*time.Minute, "pause again after the retried warm-up", paused(1))
	recordHistory(t, r.c, run.GetID(), "testdata/campaign_paused.json")
	r.decide(t, name, workflows.UpdateSkip)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := run.Get(ctx, &res); err != nil {
		r.explain(t, name)
		t.Fatal(err)
	}
	st := res.State
	if st.Phase != workflows.PhaseDone || st.Step != 1 || len(st.Steps) != 1 || st.Steps[0].Trained < 1 || strings.Join(st.Skipped, ",") != "warmup" || st.Failure != nil {
		t.Fatalf("after skip: phase %s, step %d, steps %+v, skipped %v, failure %v", st.Phase, st.Step, st.Steps, st.Skipped, st.Failure)
	}
	log, _ := os.ReadFile(filepath.Join(home, "gpu", "trainer", "ops.log"))
	for _, key := range []string{"critic_fit %s/%s/critic/1 ", "critic_fit %s/%s/warmup-retry-1/critic/1 ", "ppo_step %s/%s/ppo/1 "} {
		k := fmt.Sprintf(key, name, st.Epoch)
		if n := strings.Count(string(log), "commit "+k); n != 1 {
			t.Errorf("%s committed %d times:\n%s", k, n, log)
		}
	}
}

// recordHistory writes a workflow's history so far for the replay test, when
// T1FLOW_RECORD_HISTORY=1.
func recordHistory(t *testing.T, c client.Client, wid, file string) {
	t.Helper()
	recordRun(t, c, wid, "", file)
}

// recordRun is recordHistory of one run ("": the latest).
func recordRun(t *testing.T, c client.Client, wid, runID, file string) {
	t.Helper()
	if os.Getenv("T1FLOW_RECORD_HISTORY") != "1" {
		return
	}
	var h historypb.History
	it := c.GetWorkflowHistory(context.Background(), wid, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
