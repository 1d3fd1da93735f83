// Package campaign reads and validates campaign configs (TOML).
package campaign

import (
	"errors"
	"fmt"
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
		Warmup string   `toml:"warmup" json:"warmup"`
		Train  string   `toml:"train" json:"train"`
		Eval   []string `toml:"eval" json:"eval"`
	} `toml:"pools" json:"pools"`
	Policy struct {
		Init         string   `toml:"init" json:"init"`           // informational: the gpu worker's -init
		Inference    []string `toml:"inference" json:"inference"` // empty: the gpu worker's local server
		MaxNewTokens int      `toml:"max_new_tokens" json:"max_new_tokens"`
		Temperature  float64  `toml:"temperature" json:"temperature"`
		MaxContext   int      `toml:"max_context" json:"max_context"`
		Preset       string   `toml:"preset" json:"preset"` // trainer hyperparameter preset
	} `toml:"policy" json:"policy"`
	SFT struct {
		Enabled bool `toml:"enabled" json:"enabled"`
		Epochs  int  `toml:"epochs" json:"epochs"`
	} `toml:"sft" json:"sft"`
	CriticWarmup struct {
		Epochs    int     `toml:"epochs" json:"epochs"`         // passes over the warm-up pool (rollouts)
		FitEpochs int     `toml:"fit_epochs" json:"fit_epochs"` // critic_fit epochs per pass
		EVGate    float64 `toml:"ev_gate" json:"ev_gate"`       // PPO starts only when explained variance reaches this
		MaxRounds int     `toml:"max_rounds" json:"max_rounds"` // warm-up rounds to reach the gate
	} `toml:"critic_warmup" json:"critic_warmup"`
	PPO struct {
		Steps              int     `toml:"steps" json:"steps"`
		TasksPerStep       int     `toml:"tasks_per_step" json:"tasks_per_step"`
		Concurrency        int     `toml:"concurrency" json:"concurrency"`
		TurnCap            int     `toml:"turn_cap" json:"turn_cap"`
		MaxFailedShare     float64 `toml:"max_failed_share" json:"max_failed_share"`
		ContinueAsNewEvery int     `toml:"continue_as_new_every" json:"continue_as_new_every"`
	} `toml:"ppo" json:"ppo"`
	Eval struct {
		Every       int  `toml:"every" json:"every"` // steps between evals; 0: only base, SFT and final
		AtEnd       bool `toml:"at_end" json:"at_end"`
		Base        bool `toml:"base" json:"base"`
		Attempts    int  `toml:"attempts" json:"attempts"`
		TurnCap     int  `toml:"turn_cap" json:"turn_cap"`
		Concurrency int  `toml:"concurrency" json:"concurrency"`
	} `toml:"eval" json:"eval"`
}

// Defaults fills what a config leaves out.
func defaults() Config {
	var c Config
	c.S = 20
	c.Policy.Init = "random"
	c.Policy.MaxNewTokens = 64
	c.Policy.Temperature = 1.0
	c.Policy.Preset = "t1"
	c.SFT.Epochs = 10
	c.CriticWarmup.Epochs = 1
	c.CriticWarmup.FitEpochs = 20
	c.CriticWarmup.EVGate = 0.0
	c.CriticWarmup.MaxRounds = 3
	c.PPO.Steps = 3
	c.PPO.TasksPerStep = 4
	c.PPO.Concurrency = 2
	c.PPO.TurnCap = 300
	c.PPO.MaxFailedShare = 0.25
	c.PPO.ContinueAsNewEvery = 20
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

// positive is the check most counts need: at least 1.
func (ch *checker) positive(field string, v int) {
	if v < 1 {
		ch.bad(field, "= %d must be at least 1", v)
	}
}

func (ch *checker) nonNegative(field string, v int) {
	if v < 0 {
		ch.bad(field, "= %d must be >= 0", v)
	}
}

func (ch *checker) check(c *Config) {
	if !nameRe.MatchString(c.Name) {
		ch.bad("name", "= %q must be 1-64 letters, digits, '.', '_' or '-'", c.Name)
	}
	ch.positive("s", c.S)
	if c.Pools.Train == "" {
		ch.bad("pools.train", "is required (a pool of training tasks)")
	}
	ch.positive("policy.max_new_tokens", c.Policy.MaxNewTokens)
	if c.Policy.Temperature < 0 {
		ch.bad("policy.temperature", "= %v must be >= 0", c.Policy.Temperature)
	}
	switch c.Policy.Preset {
	case "t1", "small":
	default:
		ch.bad("policy.preset", "= %q must be t1 or small", c.Policy.Preset)
	}
	ch.positive("sft.epochs", c.SFT.Epochs)
	ch.nonNegative("critic_warmup.epochs", c.CriticWarmup.Epochs)
	ch.positive("critic_warmup.fit_epochs", c.CriticWarmup.FitEpochs)
	if c.CriticWarmup.EVGate > 1 {
		ch.bad("critic_warmup.ev_gate", "= %v must be at most 1", c.CriticWarmup.EVGate)
	}
	ch.positive("critic_warmup.max_rounds", c.CriticWarmup.MaxRounds)
	ch.positive("ppo.steps", c.PPO.Steps)
	ch.positive("ppo.tasks_per_step", c.PPO.TasksPerStep)
	ch.positive("ppo.concurrency", c.PPO.Concurrency)
	ch.positive("ppo.turn_cap", c.PPO.TurnCap)
	if c.PPO.MaxFailedShare < 0 || c.PPO.MaxFailedShare > 1 {
		ch.bad("ppo.max_failed_share", "= %v must be between 0 and 1", c.PPO.MaxFailedShare)
	}
	ch.positive("ppo.continue_as_new_every", c.PPO.ContinueAsNewEvery)
	ch.nonNegative("eval.every", c.Eval.Every)
	ch.positive("eval.attempts", c.Eval.Attempts)
	ch.positive("eval.turn_cap", c.Eval.TurnCap)
	ch.positive("eval.concurrency", c.Eval.Concurrency)
}

// Describe lists the fields at fault, one per line, indented under a heading.
func Describe(err error) string { return strings.ReplaceAll(err.Error(), "\n", "\n  ") }
