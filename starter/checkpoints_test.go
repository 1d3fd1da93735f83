package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

// TestEvalAtCheckpoints evaluates two checkpoints, one named through its
// campaign and one given as a directory, and checks that each sweep was
// sampled by that checkpoint's weights and that bad references start nothing.
func TestEvalAtCheckpoints(t *testing.T) {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, _ := store.NewLocal(filepath.Join(dir, "store"))
	l := testenv.GPUWorker(t, c, st, filepath.Join(dir, "home"))
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("ckpt"), TaskCache: t.TempDir(), EpisodeDir: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", st.Root)
	t.Setenv("T1FLOW_HOME", filepath.Join(dir, "home")) // where the gpu worker wrote inference.url
	ctx := context.Background()

	// A campaign's init checkpoint (v0), found through its stored report.
	camp := fmt.Sprintf("ck%d", testenv.FreePort())
	base, err := l.Acts.TrainerSave(ctx, gpu.SaveInput{Name: camp + "/e1/init"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutJSON(ctx, st, "campaigns/"+camp+"/report.json", workflows.CampaignReportData{
		State: workflows.CampaignState{Epoch: "e1", Checkpoint: &base}}); err != nil {
		t.Fatal(err)
	}
	// Other weights (another seed, version 7) as a checkpoint directory.
	other := filepath.Join(dir, "other-ck")
	py := fmt.Sprintf(`import types, trainer as T
t = T.Trainer(types.SimpleNamespace(workdir=%q, init="random", seed=5, device="cpu", slow_ms=0))
t.version = 7
t.save({"dir": %q})`, filepath.Join(dir, "other-trainer"), other)
	cmd := exec.Command(gpu.Python(), "-c", py)
	cmd.Dir = gpu.ReferenceDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make a checkpoint directory: %v\n%s", err, out)
	}

	// Bad references are named and nothing starts.
	for _, bad := range []string{"no-such-campaign:init", camp + ":step-0009", dir} {
		code, _, _, err := starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", bad, "--inference", l.Acts.Inference.BaseURL)
		if code != 2 || err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--checkpoint %s: exit %d, %v", bad, code, err)
		}
	}
	code, _, _, err := starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", camp+":init", "--agent", "oracle")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "policy") {
		t.Errorf("--checkpoint with --agent oracle: exit %d, %v", code, err)
	}

	code, out, stderr, err := starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", camp+":base,"+other,
		"--turn-cap", "2", "--max-new-tokens", "16", "--json")
	if code != 0 || err != nil {
		t.Fatalf("eval --checkpoint: %d %v\n%s", code, err, stderr)
	}
	var doc struct {
		WorkflowID  string           `json:"workflow_id"`
		Checkpoints []CheckpointJSON `json:"checkpoints"`
		Report      store.Ref        `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Checkpoints) != 2 {
		t.Fatalf("json: %v\n%s", err, out)
	}
	want := []string{"v0", "v7"}
	for i, row := range doc.Checkpoints {
		if row.WeightVersion != want[i] || row.Rollouts != 1 || row.Scored != 1 {
			t.Errorf("checkpoint %s: %+v", row.Label, row)
		}
		// Every rollout was sampled by the checkpoint's own weights.
		if len(row.PolicyVersions) != 1 || row.PolicyVersions[want[i]] != 1 {
			t.Errorf("checkpoint %s sampled by %v, want only %s", row.Label, row.PolicyVersions, want[i])
		}
	}
	if !strings.HasPrefix(doc.Checkpoints[1].Checkpoint, "import/other-ck-") {
		t.Errorf("directory checkpoint stored as %q", doc.Checkpoints[1].Checkpoint)
	}
	info, err := l.Acts.Inference.ModelInfo(ctx)
	if err != nil || info.WeightVersion != "v7" {
		t.Errorf("inference serves %s after the sweep (%v), want the last checkpoint's v7", info.WeightVersion, err)
	}
	var rep workflows.CheckpointEvalResult
	if err := store.GetJSON(ctx, st, doc.Report, &rep); err != nil || len(rep.Evals) != 2 {
		t.Fatalf("stored comparison: %v %+v", err, rep)
	}
	// The table names both checkpoints with their versions.
	code, out, _, err = starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", camp+":base,"+other,
		"--turn-cap", "2", "--max-new-tokens", "16", "--wait")
	if code != 0 || err != nil {
		t.Fatalf("eval --checkpoint --wait: %d %v", code, err)
	}
	if !strings.Contains(out, "found existing checkpoint eval") {
		t.Errorf("asking again did not find the finished sweep:\n%s", out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[f[0]] = f[1]
		}
	}
	if rows["CHECKPOINT"] != "POLICY" || rows[camp+":base"] != "v0" || rows[other] != "v7" {
		t.Errorf("comparison table:\n%s", out)
	}

	// A running campaign that samples from the same server keeps its weights.
	cfgFile := filepath.Join(dir, "busy.toml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`name = "busy-%s"
[pools]
train = "nothing-yet"
[sft]
enabled = false
[eval]
base = false
at_end = false
`, camp)), 0o644)
	if code, out, _, err := starter(t, "campaign", "start", "-f", cfgFile); code != 0 || err != nil {
		t.Fatalf("campaign start: %d %v\n%s", code, err, out)
	}
	defer starter(t, "campaign", "cancel", "busy-"+camp)
	if code, _, _, err := starter(t, "campaign", "pause", "busy-"+camp); code != 0 || err != nil {
		t.Fatalf("campaign pause: %d %v", code, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := c.QueryWorkflow(ctx, ids.CampaignWorkflowID("busy-"+camp), "", workflows.QueryStatus)
		var s workflows.CampaignStatus
		if err == nil && v.Get(&s) == nil && len(s.Inference) > 0 && s.Checkpoint != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the campaign never named its inference server")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A running campaign's checkpoints resolve through its status query,
	// with the trainer it is pinned to (a checkpoint eval loads them there).
	cks, tr, err := resolveCheckpoints(ctx, c, st, "busy-"+camp+":init,busy-"+camp+":latest")
	if err != nil || len(cks) != 2 || !strings.HasPrefix(cks[0].Checkpoint.Name, "busy-"+camp+"/") || cks[0].Checkpoint.Name != cks[1].Checkpoint.Name {
		t.Errorf("busy-%s:init,latest resolved to %+v, %v", camp, cks, err)
	}
	var bs workflows.CampaignStatus
	if v, err := c.QueryWorkflow(ctx, ids.CampaignWorkflowID("busy-"+camp), "", workflows.QueryStatus); err != nil || v.Get(&bs) != nil {
		t.Errorf("status of busy-%s: %v", camp, err)
	}
	if bs.Trainer == "" || tr == nil || tr.Name != bs.Trainer || tr.Queue != ids.TrainerQueue(bs.Trainer) {
		t.Errorf("busy-%s's checkpoints resolved to trainer %+v, want the one it is pinned to (%q)", camp, tr, bs.Trainer)
	}
	if code, out, _, _ := starter(t, "campaign", "status", "busy-"+camp); code != 0 || !strings.Contains(out, "latest checkpoint busy-"+camp+"/") {
		t.Errorf("campaign status does not name the latest checkpoint:\n%s", out)
	}
	code, _, _, err = starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", other, "--new")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "campaign busy-"+camp+" is running") {
		t.Errorf("eval --checkpoint into a running campaign's server: exit %d, %v", code, err)
	}
	// Its checkpoints, forced into its (paused) trainer's server, load on
	// that trainer's own queue.
	code, out, stderr, err = starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--harness", "short", "--checkpoint", "busy-"+camp+":init",
		"--force", "--turn-cap", "1", "--max-new-tokens", "8", "--json")
	if code != 0 || err != nil || json.Unmarshal([]byte(out), &doc) != nil {
		t.Fatalf("eval --checkpoint busy-%s:init --force: %d %v\n%s", camp, code, err, stderr)
	}
	if loads := loadQueues(t, c, doc.WorkflowID); len(loads) != 1 || loads[0] != ids.TrainerQueue(bs.Trainer) {
		t.Errorf("busy-%s:init loaded on %v, want its trainer's queue %s", camp, loads, ids.TrainerQueue(bs.Trainer))
	}
}

// loadQueues are the task queues of a workflow's InferenceLoadAll calls.
func loadQueues(t *testing.T, c client.Client, wid string) []string {
	t.Helper()
	var qs []string
	it := c.GetWorkflowHistory(context.Background(), wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "InferenceLoadAll" {
			qs = append(qs, a.GetTaskQueue().GetName())
		}
	}
	return qs
}
