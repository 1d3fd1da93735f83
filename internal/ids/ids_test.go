package ids

import "testing"

// Running executions and recorded histories hold these exact strings: a
// changed format would start duplicates instead of finding the execution.
func TestWorkflowIDsKeepTheirFormat(t *testing.T) {
	const seed = "0123456789abcdef"
	for _, c := range []struct{ got, want string }{
		{RolloutID("my camp", "ppo", 3, seed, 2), "my-camp.ppo.3." + seed + ".2"},
		{RolloutWorkflowID("c.ppo.3.x.2"), "rollout/c.ppo.3.x.2"},
		{EvalSweepWorkflowID("s 1"), "eval/s-1"},
		{CheckpointEvalWorkflowID("s 1"), "evalckpt/s-1"},
		{CheckpointSweepID("s", 2, "step 2"), "s-02-step-2"},
		{CampaignWorkflowID("my camp"), "campaign/my-camp"},
		{CampaignEvalSweepID("my camp", "step-0002"), "my-camp-eval-step-0002"},
		{PPOStepWorkflowID("my camp", 7), "ppo/my-camp/0007"},
		{WarmupWorkflowID("my camp"), "warmup/my-camp"},
		{SynthesisWorkflowID("run 1", seed, 3), "synth/run-1/" + seed + "/3"},
		{SynthesisCampaignID("run 1", seed, 3), "run-1-01234567-c3"},
		{AuditWorkflowID("run 1", seed), "audit/run-1/" + seed},
		{ReaperScheduleID("host a"), "t1flow-reaper-host-a"},
		{ReaperWorkflowID("host a"), "reaper/host-a"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
