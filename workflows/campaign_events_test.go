package workflows

import (
	"fmt"
	"strings"
	"testing"
)

// TestCampaignWritesEachStepAsTensorBoardEvents: every PPO step's metrics
// go to an event file of the campaign's run (campaigns/<name>/tensorboard/<name>/),
// the trainer's under ppo/, the rollouts' under rollout/; the first step's
// file also holds the warm-up's cold and warm EV at step 0.
func TestCampaignWritesEachStepAsTensorBoardEvents(t *testing.T) {
	env, in, _ := campaignEnv(t, func(n, _ int) (StepRecord, error) {
		return StepRecord{Step: n, Trained: 4, Rollouts: 4, RewardMean: 0.5, ResolvedRate: 0.25 * float64(n),
			Metrics: map[string]any{"explained_variance": 0.6, "policy_loss": -0.1, "replayed": false}}, nil
	})
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(storedEvents) != 2 {
		t.Fatalf("%d event files stored, want one per step (2)", len(storedEvents))
	}
	for i, ev := range storedEvents {
		step := int64(i + 1)
		if !strings.HasPrefix(ev.Key, "campaigns/c/tensorboard/c/events.out.tfevents.") || !strings.HasSuffix(ev.Key, fmt.Sprintf(".step-%06d", step)) {
			t.Errorf("step %d: key %q is not an event file of run c", step, ev.Key)
		}
		s := ev.Steps[step]
		if s["ppo/explained_variance"] != 0.6 || s["ppo/policy_loss"] != -0.1 || s["rollout/resolved_rate"] != 0.25*float64(step) || s["rollout/trained"] != 4 {
			t.Errorf("step %d scalars %v", step, s)
		}
		if _, ok := s["ppo/replayed"]; ok {
			t.Errorf("step %d: a boolean metric became a scalar: %v", step, s)
		}
	}
	if w := storedEvents[0].Steps[0]; w["critic/warmup_ev_cold"] != -2.5 || w["critic/warmup_ev_warm"] != 0.75 {
		t.Errorf("step 1's file: step 0 holds %v, want the warm-up's cold (-2.5) and warm (0.75) EV", w)
	}
	if _, ok := storedEvents[1].Steps[0]; ok {
		t.Errorf("step 2's file repeats step 0: %v", storedEvents[1].Steps)
	}
}
