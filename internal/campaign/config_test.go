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
