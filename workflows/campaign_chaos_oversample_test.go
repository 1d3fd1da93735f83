package workflows_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestCampaignChaosOversample is TestCampaignChaos's PPO phase under
// ppo.oversample = 1 at max_staleness 1, without SFT and evals: three PPO
// steps of 2 tasks, each before the last starting 3 rollouts and training
// on the first 2 outcomes, the third carried into the next step, a
// continue-as-new after step 2 (the carried rollouts travel in the
// campaign's state). The worker is killed during step 1's rollouts, while
// step 1 trains with a rollout carried, and during step 2's rollouts; the
// dev server restarts during step 3's. Every rollout runs as one execution
// and its outcome is counted once: by its step, by the step it was carried
// into, or as carried-dropped.
func TestCampaignChaosOversample(t *testing.T) {
	t.Parallel() // beside TestCampaignChaos (see there)
	r := newChaosRig(t, "chaosov")
	c, home, host := r.c, r.home, r.host

	name := fmt.Sprintf("o%d", time.Now().UnixNano()%1e9)
	cfg := smallCampaign(t, name)
	cfg.Eval.Base, cfg.Eval.AtEnd, cfg.SFT.Enabled, cfg.CriticWarmup.FitEpochs = false, false, false, 1
	cfg.PPO.Steps, cfg.PPO.ContinueAsNewEvery, cfg.PPO.MaxStaleness, cfg.PPO.Oversample, cfg.PPO.Concurrency = 3, 2, 1, 1, 3
	wid := ids.CampaignWorkflowID(name)
	startCampaign(t, c, cfg)
	status := func() workflows.CampaignStatus {
		var s workflows.CampaignStatus
		if v, err := c.QueryWorkflow(context.Background(), wid, "", workflows.QueryStatus); err == nil {
			v.Get(&s)
		}
		return s
	}
	sandboxes := func() bool { return len(testenv.Containers(t, sandbox.LabelHost, host)) > 0 }
	rollouts := func(step int) func() bool {
		return func() bool { return status().InFlight == fmt.Sprintf("ppo step %d", step) && sandboxes() }
	}
	ms := time.Millisecond
	faults := []chaosFault{
		{stage: "PPO step 1 rollouts", at: rollouts(1), jitter: 2000 * ms},
		// Step 1 collected: its update runs, its carried rollout too (if one was).
		{stage: "PPO step 1 update", at: func() bool {
			return strings.Contains(readFile(filepath.Join(home, "gpu", "trainer", "ops.log")), "begin ppo_step "+name+"/")
		}, jitter: 300 * ms},
		{stage: "PPO step 2 rollouts", at: rollouts(2), jitter: 2000 * ms},
		{stage: "PPO step 3 rollouts", at: rollouts(3), jitter: 2000 * ms, server: true},
	}
	r.inject(t, wid, faults)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var res workflows.CampaignResult
	if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &res); err != nil {
		explainCampaign(t, c, name) // where it waits
		t.Fatalf("campaign: %v", err)
	}
	t.Logf("campaign done after %.0fs", time.Since(r.began).Seconds())
	checkOversampleOutcome(t, c, cfg.Name, cfg.PPO.TasksPerStep, res.State, readFile(filepath.Join(home, "gpu", "trainer", "ops.log")))
	recordRun(t, c, wid, firstRun(t, c, wid), "testdata/campaign_oversample.json")
	recordHistory(t, c, ids.PPOStepWorkflowID(name, 2), "testdata/ppo_oversample.json")
	if left := testenv.Containers(t, sandbox.LabelHost, host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}

// checkOversampleOutcome: every PPO step trained once on at least
// tasks_per_step outcomes, every rollout ID ran as one execution, and the
// executions' outcomes are counted once each over the steps' records and
// the campaign's carried-dropped.
func checkOversampleOutcome(t *testing.T, c client.Client, name string, perStep int, s workflows.CampaignState, opsLog string) {
	t.Helper()
	if s.Phase != workflows.PhaseDone || len(s.Steps) != 3 {
		t.Fatalf("campaign ended in phase %s with %d step records", s.Phase, len(s.Steps))
	}
	for step := 1; step <= 3; step++ {
		if n := strings.Count(opsLog, fmt.Sprintf("commit ppo_step %s/%s/ppo/%d ", name, s.Epoch, step)); n != 1 {
			t.Errorf("ppo_step of step %d committed %d times", step, n)
		}
	}
	if len(s.Carried) != 0 {
		t.Errorf("carried rollouts left in the state: %v", s.Carried)
	}
	executions, counted, carried, carriedIn := 0, s.CarriedDropped, 0, 0
	for _, r := range s.Steps {
		t.Logf("step %d: %d rollouts, trained %d (carried in %d, stale %d), carried on %d, dropped %d, aborted %d, failed %d, stale %d%s",
			r.Step, r.Rollouts, r.Trained, r.CarriedIn, r.CarriedStale, r.Carried, r.Dropped, r.Aborted, r.Failed, r.Stale, workflows.OversampleText(r))
		if r.Rollouts < perStep || r.Trained == 0 {
			t.Errorf("step %d: %d outcomes, %d trained; want at least %d outcomes", r.Step, r.Rollouts, r.Trained, perStep)
		}
		// Concurrency 3 starts a step's 3 rollouts at once: a sample dropped
		// was in an abort backoff, its aborted execution counted there, and
		// a retried sample's earlier executions are in its retries.
		counted += r.Rollouts + r.Dropped
		for k, n := range r.Retries {
			counted += k * n
		}
		carried, carriedIn = carried+r.Carried, carriedIn+r.CarriedIn+r.CarriedStale
		n, distinct := rolloutExecutions(t, c, fmt.Sprintf("CampaignID = '%s' AND Stage = 'ppo' AND Step = %d", name, r.Step))
		if distinct != n {
			t.Errorf("step %d: %d rollout executions of %d rollout IDs", r.Step, n, distinct)
		}
		executions += n
	}
	if last := s.Steps[2]; last.Carried != 0 {
		t.Errorf("the last step carried %d on", last.Carried)
	}
	if counted != executions {
		t.Errorf("%d rollout executions, %d outcomes counted (steps' rollouts + %d carried dropped): each must be counted once", executions, counted, s.CarriedDropped)
	}
	if carriedIn > carried {
		t.Errorf("%d carried rollouts counted in the steps they were carried into, %d carried", carriedIn, carried)
	}
	t.Logf("%d rollout executions, %d carried on, %d counted where carried, %d carried dropped", executions, carried, carriedIn, s.CarriedDropped)
}
