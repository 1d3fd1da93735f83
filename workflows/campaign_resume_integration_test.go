package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/campaignctl"
)

// cancelAndResume cancels a campaign, waits for its sandboxes to go, and
// resumes it as `campaign resume` does; it returns the new run and the
// state it resumed from.
func (r *rig) cancelAndResume(t *testing.T, run client.WorkflowRun, name string) (client.WorkflowRun, workflows.CampaignState) {
	t.Helper()
	r.cancelCampaign(t, run)
	deadline := time.Now().Add(3 * time.Minute)
	for len(testenv.Containers(t, sandbox.LabelHost, r.host)) > 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	next, in, err := campaignctl.ResumeClosed(context.Background(), r.c, name)
	if err != nil || next == nil {
		t.Fatalf("resume of the cancelled campaign %s: run %v, err %v", name, next, err)
	}
	return next, *in.State
}

// TestCampaignResumeAfterCancel cancels a campaign twice and resumes it with
// `campaign resume` each time. First during PPO step 2's rollouts: the
// resumed run keeps the epoch, reloads checkpoint step-0001 and trains step
// 2 (its rollouts sampled by the checkpoint's version), not step 1 again.
// Then right after the trainer committed step 2, before the campaign
// recorded it (the catch: that key now only replays): the trainer's own
// state is kept, so step 2's update is in the weights and step 3 trains on
// top of it. The campaign completes; every trainer key has exactly one
// commit line in ops.log. Before `campaign resume` of a closed campaign, the
// resume was an update, refused by a closed workflow.
func TestCampaignResumeAfterCancel(t *testing.T) {
	r := newRig(t, true)
	home := t.TempDir()
	testenv.GPUWorker(t, r.c, r.st, home)
	r.pools(t)
	name := fmt.Sprintf("rs%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.SFT.Enabled, cfg.Eval.Base, cfg.Eval.AtEnd, cfg.PPO.Steps = false, false, false, 3
	cfg.Checkpoints.KeepLast = 1 // the resumes must still find what they reload
	run := startCampaign(t, r.c, cfg)
	s := r.awaitStatus(t, name, 15*time.Minute, "PPO step 2 in flight", func(s workflows.CampaignStatus) bool { return s.Step == 1 && s.InFlight == "ppo step 2" })
	opsLog := filepath.Join(home, "gpu", "trainer", "ops.log")
	ppoKey := func(step int) string { return fmt.Sprintf("ppo_step %s/%s/ppo/%d ", name, s.Epoch, step) }
	if strings.Contains(readFile(opsLog), "commit "+ppoKey(2)) {
		t.Fatal("step 2 committed before its rollouts were cancelled: too late")
	}
	run, st := r.cancelAndResume(t, run, name)
	if st.Epoch != s.Epoch || st.Step != 1 || st.Phase != workflows.PhasePPO || st.Checkpoint == nil || st.Checkpoint.Name != s.Checkpoint {
		t.Fatalf("resumed from epoch %s phase %s step %d checkpoint %v, want epoch %s, ppo, step 1, %s", st.Epoch, st.Phase, st.Step, st.Checkpoint, s.Epoch, s.Checkpoint)
	}
	ck1 := st.Checkpoint.WeightVersion

	// The catch: cancel as soon as the trainer has committed step 2.
	deadline := time.Now().Add(15 * time.Minute)
	for !strings.Contains(readFile(opsLog), "commit "+ppoKey(2)) {
		if time.Now().After(deadline) {
			r.explain(t, name)
			t.Fatal("step 2 never committed after the resume")
		}
		time.Sleep(20 * time.Millisecond)
	}
	run, st2 := r.cancelAndResume(t, run, name)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := run.Get(ctx, &res); err != nil {
		r.explain(t, name)
		t.Fatal(err)
	}
	fin := res.State
	if fin.Phase != workflows.PhaseDone || fin.Step != 3 || len(fin.Steps) != 3 || fin.Epoch != s.Epoch || len(fin.Resumes) != 2 {
		t.Fatalf("after the resumes: phase %s, step %d, steps %+v, epoch %s, resumes %+v", fin.Phase, fin.Step, fin.Steps, fin.Epoch, fin.Resumes)
	}
	t.Logf("resumes %+v; steps sampled by %s, %s, %s", fin.Resumes, fin.Steps[0].PolicyVersion, fin.Steps[1].PolicyVersion, fin.Steps[2].PolicyVersion)
	first := fin.Resumes[0]
	if first.Checkpoint != s.Checkpoint || first.Step != 1 || !first.Kept || first.TrainerVersion != ck1 || fin.Steps[1].Step != 2 || fin.Steps[1].PolicyVersion != ck1 {
		t.Errorf("first resume %+v, step 2 sampled by %s: want checkpoint %s at step 1, the trainer kept at its version %s, step 2 sampled by it",
			first, fin.Steps[1].PolicyVersion, s.Checkpoint, ck1)
	}
	second := fin.Resumes[1]
	if !second.Kept || second.KeyTag != "" {
		t.Errorf("second resume %+v: the trainer (still this campaign's) must be kept, its keys unchanged", second)
	}
	if st2.Step == 1 {
		// Cancelled in the window: step 2 committed, not recorded. Its retry
		// replayed the record, on weights that already hold its update.
		if second.TrainerVersion == second.WeightVersion || !fin.Steps[1].Metrics.Replayed() {
			t.Errorf("cancelled after the trainer committed step 2: resume %+v (trainer must be one step past the checkpoint), step 2 replayed %v",
				second, fin.Steps[1].Metrics.Replayed())
		}
		if fin.Steps[2].PolicyVersion != fin.Steps[1].Metrics["weight_version"] {
			t.Errorf("step 3 sampled by %s, want step 2's trained version %v", fin.Steps[2].PolicyVersion, fin.Steps[1].Metrics["weight_version"])
		}
	} else {
		t.Logf("the second cancel came after the campaign recorded step 2 (step %d): the replay window was missed", st2.Step)
	}
	log := readFile(opsLog)
	for step := 1; step <= 3; step++ {
		if n := strings.Count(log, "commit "+ppoKey(step)); n != 1 {
			t.Errorf("%s committed %d times:\n%s", ppoKey(step), n, log)
		}
	}
	checkRetention(t, r.st, home, fin, name+"/"+s.Epoch+"/")
	commits := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[1] == "commit" {
			if commits[f[3]]++; commits[f[3]] > 1 {
				t.Errorf("key %s committed twice:\n%s", f[3], log)
			}
		}
	}
}

// checkRetention: with checkpoints.keep_last = 1 the store keeps init,
// warmup and the final step-0003 and lost steps 1 and 2 (each reloaded by a
// resume while it was the newest); the trainer's host keeps no save
// directory and only the final checkpoint's fetched copies.
func checkRetention(t *testing.T, st store.Store, home string, fin workflows.CampaignState, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, label := range []string{"init", "warmup", "step-0003"} {
		if _, err := gpu.FindCheckpoint(ctx, st, prefix+label); err != nil {
			t.Errorf("checkpoint %s%s was deleted: %v", prefix, label, err)
		}
	}
	for _, label := range []string{"step-0001", "step-0002"} {
		if _, err := gpu.FindCheckpoint(ctx, st, prefix+label); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("checkpoint %s%s past keep_last = 1 is still in the store: %v", prefix, label, err)
		}
	}
	if r := fin.Retention; r == nil || len(r.Deleted) != 2 || r.BytesFreed <= 0 {
		t.Errorf("the campaign's retention record %+v, want steps 1 and 2 deleted with their bytes", r)
	}
	root := filepath.Join(home, "gpu", "checkpoints")
	ents, _ := os.ReadDir(root)
	fetched, _ := os.ReadDir(filepath.Join(root, "fetched"))
	var names []string
	for _, e := range append(ents, fetched...) {
		names = append(names, e.Name())
	}
	if len(ents) != 1 || len(fetched) > 2 {
		t.Errorf("the trainer's host keeps %v under gpu/checkpoints: want fetched/ with the final checkpoint (and its serving dir) only", names)
	}
}
