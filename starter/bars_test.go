package main

import (
	"strings"
	"testing"
)

// barsReport is a campaign that meets every bar; each case below breaks one.
func barsReport() ReportNumbers {
	warm := 0.75
	n := ReportNumbers{Campaign: "learn", WarmEV: &warm, Steps: []int{1, 2, 3, 4, 5, 6},
		Resolved: []float64{0.25, 0.35, 0.5, 0.6, 0.5, 0.5}}
	for range n.Steps {
		n.Metrics = append(n.Metrics, map[string]any{"explained_variance": 0.6})
	}
	n.Evals = []map[string]any{{"label": "base", "resolved_rate": 0.0}, {"label": "sft", "resolved_rate": 0.3},
		{"label": "final", "resolved_rate": 0.45}}
	return n
}

func missed(bars []Bar) []string {
	var out []string
	for _, b := range bars {
		if !b.Met {
			out = append(out, b.Name)
		}
	}
	return out
}

func TestBarsMissEachTargetOnItsOwn(t *testing.T) {
	if m := missed(checkBars(barsReport(), DefaultBars)); len(m) != 0 {
		t.Fatalf("a report that meets every bar missed %v", m)
	}
	low := 0.69
	for _, c := range []struct {
		want    string
		breakIt func(*ReportNumbers)
	}{
		{"warm EV", func(n *ReportNumbers) { n.WarmEV = &low }},
		{"warm EV", func(n *ReportNumbers) { n.WarmEV = nil }},
		{"EV in every PPO step", func(n *ReportNumbers) { n.Metrics[4]["explained_variance"] = 0.49 }},
		{"EV in every PPO step", func(n *ReportNumbers) { delete(n.Metrics[2], "explained_variance") }},
		{"PPO curve", func(n *ReportNumbers) { n.Resolved[5] = 0.39 }},
		{"PPO curve", func(n *ReportNumbers) { n.Resolved, n.Steps, n.Metrics = n.Resolved[:3], n.Steps[:3], n.Metrics[:3] }},
		{"held-out final over SFT", func(n *ReportNumbers) { n.Evals[1]["resolved_rate"] = 0.31 }},
		{"held-out final over base", func(n *ReportNumbers) { n.Evals[0]["resolved_rate"] = 0.2; n.Evals[1]["resolved_rate"] = 0.2 }},
		{"held-out final over SFT", func(n *ReportNumbers) { n.Evals = n.Evals[:1] }},
	} {
		n := barsReport()
		c.breakIt(&n)
		m := missed(checkBars(n, DefaultBars))
		if len(m) == 0 || m[0] != c.want {
			t.Errorf("broken %q: missed %v", c.want, m)
		}
	}
	n := barsReport()
	delete(n.Metrics[2], "explained_variance")
	if b := checkBars(n, DefaultBars)[1]; b.Met || b.Got != "undefined in step 3" {
		t.Errorf("a step without EV: %+v, want missed, undefined in step 3", b)
	}
	var out strings.Builder
	n = barsReport()
	n.Resolved[5] = 0.39
	err := printBars(&out, "learn", checkBars(n, DefaultBars))
	if err == nil || !strings.Contains(err.Error(), "PPO curve") || !strings.Contains(out.String(), "MISSED PPO curve") ||
		!strings.Contains(out.String(), "0.300 -> 0.445 (+0.145)") {
		t.Fatalf("err %v, out:\n%s", err, out.String())
	}
}

// A missed EV bar shows the answer-prefix ceiling of the same round or step
// beside it (the lowest step's, not another's); without one, nothing.
func TestBarsShowTheCeilingBesideTheEV(t *testing.T) {
	n := barsReport()
	warm, wb := 0.61, 0.74
	n.WarmEV, n.WarmCeiling = &warm, &wb
	for i := range n.Metrics {
		n.Metrics[i]["ceiling_ev"] = 0.8 + 0.01*float64(i)
	}
	n.Metrics[3]["explained_variance"] = 0.2
	b := checkBars(n, DefaultBars)
	if b[0].Got != "0.610, ceiling 0.740" || b[0].Met {
		t.Errorf("warm EV bar %+v", b[0])
	}
	if b[1].Got != "lowest 0.200 (step 4), ceiling 0.830" || b[1].Met {
		t.Errorf("step EV bar %+v", b[1])
	}
	// Ceilings under the bars: said, and the bars still missed.
	wb = 0.604
	n.Metrics[3]["ceiling_ev"], n.Metrics[5]["ceiling_ev"] = 0.45, 0.3
	b = checkBars(n, DefaultBars)
	if b[0].Got != "0.610, ceiling 0.604 (under the bar)" || b[0].Met {
		t.Errorf("warm EV bar %+v", b[0])
	}
	if b[1].Got != "lowest 0.200 (step 4), ceiling 0.450 (under the bar); ceiling under the bar in steps [4 6]" || b[1].Met {
		t.Errorf("step EV bar %+v", b[1])
	}
	if b := checkBars(barsReport(), DefaultBars); strings.Contains(b[0].Got+b[1].Got, "ceiling") {
		t.Errorf("bars without a ceiling show one: %+v", b[:2])
	}
}
