package campaign

import (
	"strings"
	"testing"
)

func TestParseDefaultsAndErrors(t *testing.T) {
	c, err := Parse("c.toml", "name = \"demo\"\n[pools]\ntrain = \"t1\"\neval = [\"examples\"]\n[ppo]\nsteps = 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.S != 20 || c.Pools.Warmup != "t1" || c.PPO.Steps != 2 || c.Eval.TurnCap != 60 || c.PPO.TurnCap != 300 {
		t.Fatalf("defaults: %+v", c)
	}
	_, err = Parse("c.toml", "name = \"bad name!\"\ns = 0\n[ppo]\nsteps = 0\nmax_failed_share = 2\n[eval]\nturn_cap = 0\n[extra]\nx = 1\n")
	for _, want := range []string{"c.toml: name", "c.toml: s = 0", "pools.train is required", "ppo.steps = 0", "ppo.max_failed_share = 2", "eval.turn_cap = 0", "extra"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if _, err := Parse("c.toml", "name = [\n"); err == nil || !strings.Contains(err.Error(), "not valid TOML") {
		t.Errorf("bad TOML: %v", err)
	}
}

// Greedy rollouts have no sampling distribution: PPO's ratio and the
// trainer's log-probs need one, so a campaign at temperature 0 never starts.
func TestTemperatureMustBePositive(t *testing.T) {
	for _, v := range []string{"0", "-0.5"} {
		_, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[policy]\ntemperature = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "c.toml: policy.temperature = "+v+" must be > 0") {
			t.Errorf("temperature %s: %v", v, err)
		}
	}
	if c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[policy]\ntemperature = 0.7\n"); err != nil || c.Policy.Temperature != 0.7 {
		t.Fatalf("0.7: %v", err)
	}
}

// The paper's gate by default; one round cannot have a held-out EV.
func TestWarmupGateDefaults(t *testing.T) {
	c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n")
	if err != nil || c.CriticWarmup.EVGate != 0.7 || c.CriticWarmup.MaxRounds != 2 || !c.CriticWarmup.RequireGate {
		t.Fatalf("%+v %v", c.CriticWarmup, err)
	}
	if _, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[critic_warmup]\nmax_rounds = 1\n"); err == nil || !strings.Contains(err.Error(), "critic_warmup.max_rounds = 1 must be at least 2") {
		t.Fatalf("max_rounds 1: %v", err)
	}
}

// SFT's own learning rate, minibatches and schedule: optional, never negative, a known schedule.
func TestSFTOverrides(t *testing.T) {
	c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[sft]\nactor_lr = 1e-3\nminibatches = 16\nlr_schedule = \"cosine\"\n")
	if err != nil || c.SFT.ActorLR != 1e-3 || c.SFT.Minibatches != 16 || c.SFT.LRSchedule != "cosine" {
		t.Fatalf("%+v %v", c.SFT, err)
	}
	_, err = Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[sft]\nactor_lr = -1.0\nminibatches = -2\nlr_schedule = \"linear\"\n")
	for _, want := range []string{"c.toml: sft.actor_lr = -1 must be >= 0", "c.toml: sft.minibatches = -2 must be >= 0", `c.toml: sft.lr_schedule = "linear" must be constant or cosine`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// The shipped campaign configs load as they are.
func TestExampleCampaignsParse(t *testing.T) {
	for _, f := range []string{"demo.toml", "learn.toml", "learn-async.toml", "learn-oversample.toml", "learn-check.toml", "smollm.toml", "smollm-quick.toml"} {
		if _, err := Load("../../examples/campaigns/" + f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// Aborted rollouts are retried until the step's deadline: two hours by
// default, and a deadline that leaves no time for a retry is refused.
func TestStepDeadline(t *testing.T) {
	c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n")
	if err != nil || c.PPO.StepDeadlineMinutes != 120 {
		t.Fatalf("default: %v %v", c.PPO.StepDeadlineMinutes, err)
	}
	for _, v := range []string{"0", "-5"} {
		_, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[ppo]\nstep_deadline_minutes = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "c.toml: ppo.step_deadline_minutes = "+v+" must be > 0") {
			t.Errorf("step_deadline_minutes %s: %v", v, err)
		}
	}
	if c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[ppo]\nstep_deadline_minutes = 30\n"); err != nil || c.PPO.StepDeadlineMinutes != 30 {
		t.Fatalf("30: %v %v", c.PPO.StepDeadlineMinutes, err)
	}
}

// The off-policy correction: off by default (the trainer gets no hyper and
// runs its plain loss), a known mode and a cap >= 1 sent when on.
func TestISCorrection(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	c, err := Parse("c.toml", base)
	if err != nil || c.PPO.ISCorrection != "none" || c.PPOHyper() != nil {
		t.Fatalf("default: %q %v %v", c.PPO.ISCorrection, c.PPOHyper(), err)
	}
	c, err = Parse("c.toml", base+"[ppo]\nis_correction = \"tis\"\nis_cap = 1.5\n")
	if h := c.PPOHyper(); err != nil || h["is_correction"] != "tis" || h["is_cap"] != 1.5 {
		t.Fatalf("tis: %v %v", h, err)
	}
	c, err = Parse("c.toml", base+"[ppo]\nis_correction = \"mis\"\n")
	if h := c.PPOHyper(); err != nil || h["is_correction"] != "mis" || h["is_cap"] != 2.0 {
		t.Fatalf("mis, default cap: %v %v", h, err)
	}
	_, err = Parse("c.toml", base+"[ppo]\nis_correction = \"IS\"\nis_cap = 0.5\n")
	for _, want := range []string{`c.toml: ppo.is_correction = "IS" must be none, tis or mis`, "c.toml: ppo.is_cap = 0.5 must be a number >= 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// max_staleness: 0 (on-policy) by default, never negative.
func TestMaxStaleness(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	if c, err := Parse("c.toml", base); err != nil || c.PPO.MaxStaleness != 0 {
		t.Fatalf("default: %d %v", c.PPO.MaxStaleness, err)
	}
	if c, err := Parse("c.toml", base+"[ppo]\nmax_staleness = 1\n"); err != nil || c.PPO.MaxStaleness != 1 {
		t.Fatalf("1: %d %v", c.PPO.MaxStaleness, err)
	}
	if _, err := Parse("c.toml", base+"[ppo]\nmax_staleness = -1\n"); err == nil || !strings.Contains(err.Error(), "c.toml: ppo.max_staleness = -1 must be >= 0") {
		t.Fatalf("-1: %v", err)
	}
}

// oversample: 0 by default, never negative, and only with max_staleness >= 1.
func TestOversample(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	if c, err := Parse("c.toml", base); err != nil || c.PPO.Oversample != 0 {
		t.Fatalf("default: %d %v", c.PPO.Oversample, err)
	}
	if c, err := Parse("c.toml", base+"[ppo]\nmax_staleness = 1\noversample = 2\n"); err != nil || c.PPO.Oversample != 2 {
		t.Fatalf("2: %d %v", c.PPO.Oversample, err)
	}
	if _, err := Parse("c.toml", base+"[ppo]\noversample = 1\n"); err == nil || !strings.Contains(err.Error(), "c.toml: ppo.oversample = 1 needs ppo.max_staleness >= 1") {
		t.Fatalf("without max_staleness: %v", err)
	}
	if _, err := Parse("c.toml", base+"[ppo]\nmax_staleness = 1\noversample = -1\n"); err == nil || !strings.Contains(err.Error(), "c.toml: ppo.oversample = -1 must be >= 0") {
		t.Fatalf("-1: %v", err)
	}
}

func TestCheckpointRetentionSetting(t *testing.T) {
	c, err := Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n")
	if err != nil || c.Checkpoints.KeepLast != 0 {
		t.Fatalf("default keep_last %d (want 0: keep every step checkpoint), %v", c.Checkpoints.KeepLast, err)
	}
	c, err = Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[checkpoints]\nkeep_last = 2\n")
	if err != nil || c.Checkpoints.KeepLast != 2 {
		t.Fatalf("keep_last %d, %v", c.Checkpoints.KeepLast, err)
	}
	_, err = Parse("c.toml", "name = \"x\"\n[pools]\ntrain = \"t\"\n[checkpoints]\nkeep_last = -1\n")
	if want := "c.toml: checkpoints.keep_last = -1 must be >= 0"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error does not name %q: %v", want, err)
	}
}

// PPO's learning rates: unset sends nothing (the preset's), set they ride in
// every PPO step's hyper beside an off-policy correction, and a negative or
// NaN rate is refused naming the field.
func TestPPOLearningRates(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	c, err := Parse("c.toml", base+"[ppo]\nactor_lr = 2e-5\ncritic_lr = 1e-4\nis_correction = \"tis\"\n")
	if h := c.PPOHyper(); err != nil || h["actor_lr"] != 2e-5 || h["critic_lr"] != 1e-4 || h["is_correction"] != "tis" {
		t.Fatalf("rates and tis: %v %v", h, err)
	}
	c, err = Parse("c.toml", base+"[ppo]\nactor_lr = 2e-5\n")
	if h := c.PPOHyper(); err != nil || len(h) != 1 || h["actor_lr"] != 2e-5 {
		t.Fatalf("actor only: %v %v", h, err)
	}
	_, err = Parse("c.toml", base+"[ppo]\nactor_lr = -1e-5\ncritic_lr = nan\n")
	for _, want := range []string{"c.toml: ppo.actor_lr = -1e-05 must be >= 0", "c.toml: ppo.critic_lr = NaN must be >= 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// collapse_share: off (0) by default, a share in [0, 1) when set.
func TestCollapseShare(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	if c, err := Parse("c.toml", base); err != nil || c.PPO.CollapseShare != 0 {
		t.Fatalf("default: %v %v", c.PPO.CollapseShare, err)
	}
	if c, err := Parse("c.toml", base+"[ppo]\ncollapse_share = 0.1\n"); err != nil || c.PPO.CollapseShare != 0.1 {
		t.Fatalf("0.1: %v %v", c.PPO.CollapseShare, err)
	}
	for _, v := range []string{"-0.1", "1", "nan"} {
		_, err := Parse("c.toml", base+"[ppo]\ncollapse_share = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "c.toml: ppo.collapse_share = ") {
			t.Errorf("collapse_share %s: %v", v, err)
		}
	}
}

func TestTargetKL(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	if c, err := Parse("c.toml", base); err != nil || c.PPO.TargetKL != 0 || c.PPOHyper() != nil {
		t.Fatalf("default: %v %v %v", c.PPO.TargetKL, c.PPOHyper(), err)
	}
	if c, err := Parse("c.toml", base+"[ppo]\ntarget_kl = 0.05\n"); err != nil || c.PPOHyper()["target_kl"] != 0.05 || len(c.PPOHyper()) != 1 {
		t.Fatalf("0.05: %v %v", c.PPOHyper(), err)
	}
	for _, v := range []string{"-0.01", "inf", "nan"} {
		_, err := Parse("c.toml", base+"[ppo]\ntarget_kl = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "c.toml: ppo.target_kl = ") {
			t.Errorf("target_kl %s: %v", v, err)
		}
	}
}

func TestMinPosRatio(t *testing.T) {
	base := "name = \"x\"\n[pools]\ntrain = \"t\"\n"
	if c, err := Parse("c.toml", base+"[ppo]\nmin_pos_ratio = 0.5\n"); err != nil || c.PPOHyper()["min_pos_ratio"] != 0.5 || len(c.PPOHyper()) != 1 {
		t.Fatalf("0.5: %v %v", c.PPOHyper(), err)
	}
	for _, v := range []string{"-0.1", "1", "nan"} {
		_, err := Parse("c.toml", base+"[ppo]\nmin_pos_ratio = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "c.toml: ppo.min_pos_ratio = ") {
			t.Errorf("min_pos_ratio %s: %v", v, err)
		}
	}
}
