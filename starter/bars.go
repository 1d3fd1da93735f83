package main

import (
	"fmt"
	"io"
	"math"
)

// Bars are issue 27's learning targets for one finished campaign (docs/learning.md):
// the warmed-up critic's held-out EV, every PPO step's EV, the PPO curve
// (mean resolved rate of the last two steps against the first two) and the
// final checkpoint's held-out resolved rate against SFT's and the base's.
type Bars struct {
	WarmEV   float64 // the campaign's critic_warmup.ev_gate
	StepEV   float64
	Curve    float64
	OverSFT  float64
	OverBase float64
}

// DefaultBars are issue 27's numbers.
var DefaultBars = Bars{WarmEV: 0.7, StepEV: 0.5, Curve: 0.15, OverSFT: 0.15, OverBase: 0.30}

// Bar is one target, what was measured and whether it was met.
type Bar struct {
	Name string
	Got  string
	Want string
	Met  bool
}

// checkBars measures n against b. A figure the report does not hold (no warm
// EV, fewer than four PPO steps, a missing eval) is a missed bar, never a pass.
func checkBars(n ReportNumbers, b Bars) []Bar {
	var out []Bar
	add := func(name, got, want string, met bool) { out = append(out, Bar{name, got, want, met}) }
	if n.WarmEV == nil {
		add("warm EV", "undefined", fmt.Sprintf(">= %.2f", b.WarmEV), false)
	} else {
		add("warm EV", fmt.Sprintf("%.3f%s", *n.WarmEV, ceilingOf(n.WarmCeiling, b.WarmEV)), fmt.Sprintf(">= %.2f", b.WarmEV), *n.WarmEV >= b.WarmEV)
	}
	lo, loStep, loAt := math.Inf(1), 0, 0
	var under []int // steps whose ceiling is below the bar: no critic reading the answer meets it there
	for i, s := range n.Steps {
		ev := math.NaN()
		if i < len(n.Metrics) {
			ev = metric(n.Metrics[i], "explained_variance")
			if c := metric(n.Metrics[i], "ceiling_ev"); c < b.StepEV {
				under = append(under, s)
			}
		}
		if math.IsNaN(ev) {
			ev = math.Inf(-1) // undefined in a step: nothing explained
		}
		if ev < lo {
			lo, loStep, loAt = ev, s, i
		}
	}
	if len(n.Steps) == 0 {
		add("EV in every PPO step", "no PPO step", fmt.Sprintf(">= %.2f", b.StepEV), false)
	} else {
		var top *float64
		if loAt < len(n.Metrics) {
			if v := metric(n.Metrics[loAt], "ceiling_ev"); !math.IsNaN(v) {
				top = &v
			}
		}
		got := fmt.Sprintf("lowest %.3f (step %d)%s", lo, loStep, ceilingOf(top, b.StepEV))
		if math.IsInf(lo, -1) {
			// Every return in the step equal (EV has no variance to explain), or no EV reported.
			got = fmt.Sprintf("undefined in step %d", loStep)
		}
		if len(under) > 0 {
			got += fmt.Sprintf("; ceiling under the bar in steps %v", under)
		}
		add("EV in every PPO step", got, fmt.Sprintf(">= %.2f", b.StepEV), lo >= b.StepEV)
	}
	if k := len(n.Resolved); k < 4 {
		add("PPO curve", fmt.Sprintf("%d steps", k), "at least 4 steps", false)
	} else {
		first, last := (n.Resolved[0]+n.Resolved[1])/2, (n.Resolved[k-2]+n.Resolved[k-1])/2
		add("PPO curve", fmt.Sprintf("%.3f -> %.3f (%+.3f)", first, last, last-first), fmt.Sprintf(">= %+.2f", b.Curve), last-first >= b.Curve-1e-9)
	}
	base, okB := evalRate(n, "base")
	sft, okS := evalRate(n, "sft")
	final, okF := evalRate(n, "final")
	for _, c := range []struct {
		name, label string
		ref, over   float64
		ok          bool
	}{{"held-out final over SFT", "sft", sft, b.OverSFT, okS}, {"held-out final over base", "base", base, b.OverBase, okB}} {
		if !c.ok || !okF {
			add(c.name, "no "+c.label+" or final eval", fmt.Sprintf("%+.0f points", 100*c.over), false)
			continue
		}
		add(c.name, fmt.Sprintf("%.1f%% -> %.1f%% (%+.1f points)", 100*c.ref, 100*final, 100*(final-c.ref)),
			fmt.Sprintf(">= %+.0f points", 100*c.over), final-c.ref >= c.over-1e-9)
	}
	return out
}

// ceilingOf is the answer-prefix ceiling beside an EV, when there is one:
// the most any value reading only the answer so far explains of the same
// returns, and whether it is under the bar.
func ceilingOf(c *float64, bar float64) string {
	if c == nil {
		return ""
	}
	if *c < bar {
		return fmt.Sprintf(", ceiling %.3f (under the bar)", *c)
	}
	return fmt.Sprintf(", ceiling %.3f", *c)
}

// evalRate is the resolved rate of the first eval labelled label.
func evalRate(n ReportNumbers, label string) (float64, bool) {
	for _, e := range n.Evals {
		if e["label"] == label {
			r, ok := e["resolved_rate"].(float64)
			return r, ok
		}
	}
	return 0, false
}

// printBars writes one line per bar and returns an error naming the missed ones.
func printBars(w io.Writer, campaign string, bars []Bar) error {
	var missed []string
	for _, b := range bars {
		mark := "met   "
		if !b.Met {
			mark = "MISSED"
			missed = append(missed, b.Name)
		}
		fmt.Fprintf(w, "%s %-26s %-36s want %s\n", mark, b.Name, b.Got, b.Want)
	}
	if len(missed) > 0 {
		return fmt.Errorf("campaign %s missed %d of %d learning bars: %v", campaign, len(missed), len(bars), missed)
	}
	return nil
}
