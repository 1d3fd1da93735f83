// Package campaign reads and validates campaign configs (TOML).
package campaign

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// Config is one campaign: pools, policy, stages, and the failure policy.
type Config struct {
	Name  string `toml:"name" json:"name"`
	S     int    `toml:"s" json:"s"` // reward = passing assertions / S, fixed for the campaign
	Pools struct {
		Warmup string `toml:"warmup" json:"warmup"`
		Train  string `toml:"train" json:"train"`
		// SFT is the pool whose reference solutions SFT trains on (empty: Train).
		SFT  string   `toml:"sft" json:"sft,omitempty"`
		Eval []string `toml:"eval" json:"eval"`
	} `toml:"pools" json:"pools"`
	Policy struct {
		// Init is what the campaign starts from, loaded into the trainer and
		// inference before anything trains: "random" (from Seed), a saved
		// checkpoint's name, CAMPAIGN:LABEL, or a checkpoint directory (the
		// starter resolves the last three into a stored checkpoint).
		Init         string   `toml:"init" json:"init"`
		Seed         int      `toml:"seed" json:"seed"`           // of a random init
		Inference    []string `toml:"inference" json:"inference"` // empty: the gpu worker's local server
		MaxNewTokens int      `toml:"max_new_tokens" json:"max_new_tokens"`
		Temperature  float64  `toml:"temperature" json:"temperature"`
		MaxContext   int      `toml:"max_context" json:"max_context"`
		// HandoffTokens: on terminus-2, hand off to a fresh context when fewer
		// tokens than this remain (0: Harbor's 8,000; negative: never).
		HandoffTokens int    `toml:"handoff_tokens" json:"handoff_tokens,omitempty"`
		Preset        string `toml:"preset" json:"preset"` // trainer hyperparameter preset
		// Harness: terminus-2 (Harbor's, docs/harness.md) or short (t1flow's
		// 4-line prompt, for tiny policies such as the reference model).
		Harness string `toml:"harness" json:"harness"`
	} `toml:"policy" json:"policy"`
	SFT struct {
		Enabled bool `toml:"enabled" json:"enabled"`
		Epochs  int  `toml:"epochs" json:"epochs"`
		// ActorLR and Minibatches override the preset's for SFT only (0: the
		// preset's): a policy learns the action format in fewer samples from
		// smaller, faster steps than PPO's learning rate takes.
		ActorLR     float64 `toml:"actor_lr" json:"actor_lr,omitempty"`
		Minibatches int     `toml:"minibatches" json:"minibatches,omitempty"`
		// LRSchedule is how SFT's learning rate moves over its steps:
		// "constant" (the default, "" too) or "cosine" (down to 0 at the last
		// step), so the SFT policy does not hang on its last minibatches.
		LRSchedule string `toml:"lr_schedule" json:"lr_schedule,omitempty"`
	} `toml:"sft" json:"sft"`
	CriticWarmup struct {
		Epochs    int     `toml:"epochs" json:"epochs"`         // passes over the warm-up pool (rollouts)
		FitEpochs int     `toml:"fit_epochs" json:"fit_epochs"` // critic_fit epochs per pass
		EVGate    float64 `toml:"ev_gate" json:"ev_gate"`       // PPO starts only when held-out explained variance reaches this
		MaxRounds int     `toml:"max_rounds" json:"max_rounds"` // warm-up rounds to reach the gate (the first has no held-out EV)
		// RequireGate false makes the gate advisory: reported, never blocking
		// (for policies whose rollouts all score alike, where EV is undefined).
		RequireGate bool `toml:"require_gate" json:"require_gate"`
	} `toml:"critic_warmup" json:"critic_warmup"`
	PPO struct {
		Steps int `toml:"steps" json:"steps"`
		// ActorLR and CriticLR override the preset's learning rates for the
		// PPO steps (0: the preset's); CriticLR the warm-up's critic fits
		// too, which train the same critic. The t1 preset's 1e-6 and 1.5e-5
		// are the paper's, for a 32B model on large batches: a 135M model
		// on a few rollouts a step barely moves at them.
		ActorLR            float64 `toml:"actor_lr" json:"actor_lr,omitempty"`
		CriticLR           float64 `toml:"critic_lr" json:"critic_lr,omitempty"`
		TasksPerStep       int     `toml:"tasks_per_step" json:"tasks_per_step"`
		Concurrency        int     `toml:"concurrency" json:"concurrency"`
		TurnCap            int     `toml:"turn_cap" json:"turn_cap"`
		MaxFailedShare     float64 `toml:"max_failed_share" json:"max_failed_share"`
		ContinueAsNewEvery int     `toml:"continue_as_new_every" json:"continue_as_new_every"`
		// StepDeadlineMinutes bounds a step's retries of aborted rollouts
		// (R3 routing missing): none starts later than this after the step's
		// rollouts began; the still-aborted are then left out, counted.
		StepDeadlineMinutes float64 `toml:"step_deadline_minutes" json:"step_deadline_minutes"`
		// ISCorrection weighs each loss token by the trainer's over the
		// sampler's probability of it (the sampler's own log-probs, TITO):
		// "none" (the plain PPO loss), "tis" (truncated at ISCap) or "mis"
		// (tokens outside [1/ISCap, ISCap] masked out). docs/campaigns.md.
		// MaxStaleness K: a step trains rollouts sampled within K weight
		// versions of the policy being trained; older ones are left out and
		// counted stale (0: only the current version, on-policy).
		MaxStaleness int `toml:"max_staleness" json:"max_staleness,omitempty"`
		// Oversample O: a step starts tasks_per_step + O rollouts (less those
		// carried into it), trains once tasks_per_step have an outcome, and
		// carries the ones still running into the next step instead of
		// cancelling them (0: every rollout of a step is waited for).
		// Needs MaxStaleness >= 1: a carried rollout trains one version behind.
		Oversample   int     `toml:"oversample" json:"oversample,omitempty"`
		ISCorrection string  `toml:"is_correction" json:"is_correction,omitempty"`
		ISCap        float64 `toml:"is_cap" json:"is_cap,omitempty"`
		// CollapseShare C > 0: a step whose batch earns a mean reward under
		// C times the best earlier step's is not trained on; the campaign
		// pauses on it (RewardCollapse) so an operator can look before the
		// policy trains on a batch with nothing left to learn from. A retry
		// resamples and trains whatever it earns; 0 never pauses.
		CollapseShare float64 `toml:"collapse_share" json:"collapse_share,omitempty"`
		// TargetKL > 0: PPO's early stop. Once a minibatch's approx_kl
		// against the step's starting policy exceeds it, the actor takes no
		// more updates that step (the critic goes on fitting); 0: off.
		TargetKL float64 `toml:"target_kl" json:"target_kl,omitempty"`
		// MinPosRatio P > 0: after a step's update every token the batch
		// gave a positive advantage keeps at least P of its probability,
		// or the actor's update is halved back toward the step's start until
		// it does (at most 5 times, then undone); 0: off.
		MinPosRatio float64 `toml:"min_pos_ratio" json:"min_pos_ratio,omitempty"`
	} `toml:"ppo" json:"ppo"`
	Eval struct {
		Every       int  `toml:"every" json:"every"` // steps between evals; 0: only base, SFT and final
		AtEnd       bool `toml:"at_end" json:"at_end"`
		Base        bool `toml:"base" json:"base"`
		Attempts    int  `toml:"attempts" json:"attempts"`
		TurnCap     int  `toml:"turn_cap" json:"turn_cap"`
		Concurrency int  `toml:"concurrency" json:"concurrency"`
	} `toml:"eval" json:"eval"`
	// Checkpoints is the retention of PPO step checkpoints in the store
	// (docs/campaigns.md, "Checkpoints and disk").
	Checkpoints struct {
		// KeepLast > 0 keeps the newest KeepLast step checkpoints and deletes
		// older ones, except the named (init, sft, warmup), the final step's,
		// those an eval recorded and those pinned; 0 keeps every one.
		KeepLast int `toml:"keep_last" json:"keep_last,omitempty"`
	} `toml:"checkpoints" json:"checkpoints,omitzero"`
}

// Defaults fills what a config leaves out.
func defaults() Config {
	var c Config
	c.S = 20
	c.Policy.Init = "random"
	c.Policy.MaxNewTokens = 64
	c.Policy.Temperature = 1.0
	c.Policy.Preset = "t1"
	c.Policy.Harness = "terminus-2"
	c.SFT.Epochs = 10
	c.CriticWarmup.Epochs = 1
	c.CriticWarmup.FitEpochs = 20
	// The paper's warm critic sits at EV 0.71-0.86 from the first update (cold:
	// -33.6) after one warm-up epoch: round 1 is that epoch, round 2 reads
	// the EV on rollouts the critic was not fitted on.
	c.CriticWarmup.EVGate = 0.7
	c.CriticWarmup.MaxRounds = 2
	c.CriticWarmup.RequireGate = true
	c.PPO.Steps = 3
	c.PPO.TasksPerStep = 4
	c.PPO.Concurrency = 2
	c.PPO.TurnCap = 300
	c.PPO.MaxFailedShare = 0.25
	c.PPO.ContinueAsNewEvery = 20
	c.PPO.StepDeadlineMinutes = 120
	c.PPO.ISCorrection = "none"
	c.PPO.ISCap = 2
	c.Eval.AtEnd = true
	c.Eval.Base = true
	c.Eval.Attempts = 1
	c.Eval.TurnCap = 60
	c.Eval.Concurrency = 2
	return c
}

// FieldError names the file and field at fault.
type FieldError struct{ File, Field, Msg string }

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s %s", e.File, e.Field, e.Msg) }

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Load reads and validates a campaign file; every problem is reported.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return Parse(path, string(b))
}

// Parse validates a campaign config's text.
func Parse(file, text string) (Config, error) {
	c := defaults()
	md, err := toml.Decode(text, &c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return c, &FieldError{File: file, Field: fmt.Sprintf("(line %d)", pe.Position.Line), Msg: "is not valid TOML: " + pe.Message}
		}
		return c, &FieldError{File: file, Field: "(file)", Msg: err.Error()}
	}
	ch := &checker{file: file}
	for _, k := range md.Undecoded() {
		ch.bad(k.String(), "is not a campaign setting")
	}
	if c.Pools.Warmup == "" {
		c.Pools.Warmup = c.Pools.Train
	}
	ch.check(&c)
	if len(ch.errs) > 0 {
		return c, errors.Join(ch.errs...)
	}
	return c, nil
}

// checker gathers every problem in a config, each naming its field, so a
// user fixes them in one pass.
type checker struct {
	file string
	errs []error
}

func (ch *checker) bad(field, format string, args ...any) {
	ch.errs = append(ch.errs, &FieldError{File: ch.file, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// A rule is one check of a config: the field it names, whether the value
// there is wrong and, if so, what is wrong with it.
type rule struct {
	field string
	wrong bool
	msg   string
}

// positive is the rule most counts need: at least 1.
func positive(field string, v int) rule {
	return rule{field, v < 1, fmt.Sprintf("= %d must be at least 1", v)}
}

func nonNegative(field string, v int) rule {
	return rule{field, v < 0, fmt.Sprintf("= %d must be >= 0", v)}
}

// check applies every rule, in order, so the problems are listed in the
// order of the settings.
func (ch *checker) check(c *Config) {
	for _, r := range []rule{
		{"name", !nameRe.MatchString(c.Name), fmt.Sprintf("= %q must be 1-64 letters, digits, '.', '_' or '-'", c.Name)},
		positive("s", c.S),
		{"pools.train", c.Pools.Train == "", "is required (a pool of training tasks)"},
		{"policy.init", strings.TrimSpace(c.Policy.Init) == "", "is required: random, a checkpoint's name, CAMPAIGN:LABEL or a checkpoint directory"},
		nonNegative("policy.seed", c.Policy.Seed),
		positive("policy.max_new_tokens", c.Policy.MaxNewTokens),
		// PPO's ratio and the critic need a sampling distribution: greedy (0) has none.
		{"policy.temperature", !(c.Policy.Temperature > 0), fmt.Sprintf("= %v must be > 0 (PPO and critic rollouts sample; greedy decoding has no distribution to train on)", c.Policy.Temperature)},
		{"policy.preset", c.Policy.Preset != "t1" && c.Policy.Preset != "small", fmt.Sprintf("= %q must be t1 or small", c.Policy.Preset)},
		{"policy.harness", c.Policy.Harness != "terminus-2" && c.Policy.Harness != "short", fmt.Sprintf("= %q must be terminus-2 or short", c.Policy.Harness)},
		positive("sft.epochs", c.SFT.Epochs),
		{"sft.actor_lr", c.SFT.ActorLR < 0, fmt.Sprintf("= %v must be >= 0 (0: the preset's)", c.SFT.ActorLR)},
		{"ppo.actor_lr", !(c.PPO.ActorLR >= 0), fmt.Sprintf("= %v must be >= 0 (0: the preset's)", c.PPO.ActorLR)},
		{"ppo.critic_lr", !(c.PPO.CriticLR >= 0), fmt.Sprintf("= %v must be >= 0 (0: the preset's)", c.PPO.CriticLR)},
		nonNegative("sft.minibatches", c.SFT.Minibatches),
		{"sft.lr_schedule", c.SFT.LRSchedule != "" && c.SFT.LRSchedule != "constant" && c.SFT.LRSchedule != "cosine", fmt.Sprintf("= %q must be constant or cosine", c.SFT.LRSchedule)},
		nonNegative("critic_warmup.epochs", c.CriticWarmup.Epochs),
		positive("critic_warmup.fit_epochs", c.CriticWarmup.FitEpochs),
		{"critic_warmup.ev_gate", c.CriticWarmup.EVGate > 1, fmt.Sprintf("= %v must be at most 1", c.CriticWarmup.EVGate)},
		{"critic_warmup.max_rounds", c.CriticWarmup.MaxRounds < 2, fmt.Sprintf("= %d must be at least 2 (the gate reads explained variance on a round the critic was not fitted on)", c.CriticWarmup.MaxRounds)},
		positive("ppo.steps", c.PPO.Steps),
		positive("ppo.tasks_per_step", c.PPO.TasksPerStep),
		positive("ppo.concurrency", c.PPO.Concurrency),
		positive("ppo.turn_cap", c.PPO.TurnCap),
		{"ppo.max_failed_share", c.PPO.MaxFailedShare < 0 || c.PPO.MaxFailedShare > 1, fmt.Sprintf("= %v must be between 0 and 1", c.PPO.MaxFailedShare)},
		positive("ppo.continue_as_new_every", c.PPO.ContinueAsNewEvery),
		{"ppo.step_deadline_minutes", !(c.PPO.StepDeadlineMinutes > 0), fmt.Sprintf("= %v must be > 0 (minutes in which a step retries aborted rollouts)", c.PPO.StepDeadlineMinutes)},
		nonNegative("ppo.max_staleness", c.PPO.MaxStaleness),
		nonNegative("ppo.oversample", c.PPO.Oversample),
		{"ppo.oversample", c.PPO.Oversample > 0 && c.PPO.MaxStaleness < 1, fmt.Sprintf("= %d needs ppo.max_staleness >= 1 (is %d): the rollouts it carries into the next step train one version behind", c.PPO.Oversample, c.PPO.MaxStaleness)},
		{"ppo.collapse_share", !(c.PPO.CollapseShare >= 0 && c.PPO.CollapseShare < 1), fmt.Sprintf("= %v must be at least 0 and under 1 (a share of the best earlier step's mean reward; 0: never pause)", c.PPO.CollapseShare)},
		{"ppo.target_kl", !(c.PPO.TargetKL >= 0) || math.IsInf(c.PPO.TargetKL, 0), fmt.Sprintf("= %v must be a number >= 0 (the approx_kl over which a step's actor stops updating; 0: off)", c.PPO.TargetKL)},
		{"ppo.min_pos_ratio", !(c.PPO.MinPosRatio >= 0 && c.PPO.MinPosRatio < 1), fmt.Sprintf("= %v must be at least 0 and under 1 (the share of its probability a positive-advantage token keeps through an update; 0: off)", c.PPO.MinPosRatio)},
		{"ppo.is_correction", !validISCorrection(c.PPO.ISCorrection), fmt.Sprintf("= %q must be none, tis or mis", c.PPO.ISCorrection)},
		{"ppo.is_cap", !(c.PPO.ISCap >= 1) || math.IsInf(c.PPO.ISCap, 0), fmt.Sprintf("= %v must be a number >= 1 (TIS truncates the importance weight at it; MIS keeps tokens whose weight is within [1/is_cap, is_cap])", c.PPO.ISCap)},
		nonNegative("eval.every", c.Eval.Every),
		positive("eval.attempts", c.Eval.Attempts),
		positive("eval.turn_cap", c.Eval.TurnCap),
		positive("eval.concurrency", c.Eval.Concurrency),
		{"checkpoints.keep_last", c.Checkpoints.KeepLast < 0, fmt.Sprintf("= %d must be >= 0 (0 keeps every step checkpoint; N keeps the newest N)", c.Checkpoints.KeepLast)},
	} {
		if r.wrong {
			ch.bad(r.field, "%s", r.msg)
		}
	}
}

func validISCorrection(s string) bool { return s == "none" || s == "tis" || s == "mis" }

// PPOHyper is what a PPO step sends the trainer beyond the preset: the
// learning rates when set, the off-policy correction when one is set
// (none sends nothing, so the trainer runs its default loss), and target_kl
// and min_pos_ratio when set. Nil when
// there is nothing to send.
func (c *Config) PPOHyper() map[string]any {
	h := map[string]any{}
	if c.PPO.ActorLR > 0 {
		h["actor_lr"] = c.PPO.ActorLR
	}
	if c.PPO.CriticLR > 0 {
		h["critic_lr"] = c.PPO.CriticLR
	}
	if c.PPO.ISCorrection != "" && c.PPO.ISCorrection != "none" {
		h["is_correction"], h["is_cap"] = c.PPO.ISCorrection, c.PPO.ISCap
	}
	if c.PPO.TargetKL > 0 {
		h["target_kl"] = c.PPO.TargetKL
	}
	if c.PPO.MinPosRatio > 0 {
		h["min_pos_ratio"] = c.PPO.MinPosRatio
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// Describe lists the fields at fault, one per line, indented under a heading.
func Describe(err error) string { return strings.ReplaceAll(err.Error(), "\n", "\n  ") }
