package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strings"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// reportCmd renders a finished campaign: plots as inline SVG in one HTML
// file, and the same numbers as JSON.
func reportCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("html", "", "write the HTML report here")
	asJSON := fs.Bool("json", false, "print the numbers as JSON")
	storeDir := fs.String("store", config.StoreDir(), "artifact store")
	const usage = "usage: starter report CAMPAIGN (--html FILE | --json)"
	name, err := parseOne(fs, args, usage)
	if err != nil {
		return err
	}
	if *out == "" && !*asJSON {
		return badInput(errors.New(usage))
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	ref, err := st.Lookup(ctx, "campaigns/"+ids.Clean(name)+"/report.json")
	if errors.Is(err, store.ErrNotFound) {
		return badInput(fmt.Errorf("campaign %q has no report yet (it is written when the campaign finishes)", name))
	}
	if err != nil {
		return err
	}
	var rep workflows.CampaignReportData
	if err := store.GetJSON(ctx, st, ref, &rep); err != nil {
		return err
	}
	nums := reportNumbers(rep)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(nums)
	}
	if err := os.WriteFile(*out, []byte(renderHTML(rep, nums)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %s\n", *out)
	return nil
}

// ReportNumbers are the series the report plots.
type ReportNumbers struct {
	Campaign   string           `json:"campaign"`
	Steps      []int            `json:"steps"`
	Reward     []float64        `json:"reward_mean"`
	Resolved   []float64        `json:"resolved_rate"` // per step: share of trained rollouts resolved
	EV         []float64        `json:"explained_variance"`
	GapReplay  []float64        `json:"logprob_gap_replay"`
	GapFree    []float64        `json:"logprob_gap_noreplay"`
	Turns      []float64        `json:"mean_turns"`
	ColdEV     *float64         `json:"cold_ev,omitempty"`
	WarmEV     *float64         `json:"warm_ev,omitempty"`
	WarmupGate string           `json:"warmup_gate,omitempty"` // how the critic warm-up gate was decided
	Evals      []map[string]any `json:"evals"`
	Excluded   map[string]int   `json:"excluded"`
	// Tampered counts PPO-step rollouts refused for tampering (trained on
	// at reward 0); each eval's count is in its "tampered".
	Tampered   int              `json:"tampered"`
	StepTamper []int            `json:"tampered_per_step"`
	Checkpoint []string         `json:"checkpoints"`
	Metrics    []map[string]any `json:"metrics"`
	// Per step: samples started again after an R3 abort, and the most retries one took.
	Retried    []int `json:"retried"`
	RetriesMax []int `json:"retries_max"`
}

func metric(m map[string]any, k string) float64 {
	if f, ok := m[k].(float64); ok {
		return f
	}
	return math.NaN()
}

func reportNumbers(rep workflows.CampaignReportData) ReportNumbers {
	n := ReportNumbers{Campaign: rep.Config.Name, ColdEV: rep.State.ColdEV, WarmEV: rep.State.WarmEV, WarmupGate: rep.State.WarmupGate,
		Excluded: map[string]int{"aborted": rep.State.Aborted, "failed": rep.State.Failed, "stale": rep.State.Stale}}
	for _, s := range rep.State.Steps {
		n.Steps = append(n.Steps, s.Step)
		n.Reward = append(n.Reward, s.RewardMean)
		n.Resolved = append(n.Resolved, s.ResolvedRate)
		n.EV = append(n.EV, metric(s.Metrics, "explained_variance"))
		n.GapReplay = append(n.GapReplay, metric(s.Metrics, "logprob_gap_replay"))
		n.GapFree = append(n.GapFree, metric(s.Metrics, "logprob_gap_noreplay"))
		n.Turns = append(n.Turns, s.MeanTurns)
		n.Retried, n.RetriesMax = append(n.Retried, retriedSamples(s)), append(n.RetriesMax, s.RetriesMax)
		n.Checkpoint = append(n.Checkpoint, s.Checkpoint)
		n.Metrics = append(n.Metrics, s.Metrics)
		n.Tampered += s.Tampered
		n.StepTamper = append(n.StepTamper, s.Tampered)
	}
	for _, e := range rep.State.Evals {
		n.Evals = append(n.Evals, map[string]any{"label": e.Label, "policy": e.WeightVersion, "resolved_rate": e.Summary.ResolvedRate,
			"mean_reward": e.Summary.MeanReward, "mean_turns": e.Summary.MeanTurns, "rollouts": e.Summary.Rollouts, "tampered": e.Summary.Tampered})
	}
	// NaN is not JSON: drop undefined points to null.
	for _, xs := range [][]float64{n.EV, n.GapReplay, n.GapFree} {
		for i, x := range xs {
			if math.IsNaN(x) {
				xs[i] = 0
			}
		}
	}
	return n
}

// lineChart draws series over x as a small SVG.
func lineChart(title string, x []int, series map[string][]float64) string {
	const w, h, pad = 420.0, 180.0, 36.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, ys := range series {
		for _, y := range ys {
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
	}
	if len(x) == 0 || math.IsInf(lo, 0) {
		return fmt.Sprintf("<h3>%s</h3><p>no data</p>", html.EscapeString(title))
	}
	if hi == lo {
		hi, lo = hi+0.5, lo-0.5
	}
	px := func(i int) float64 {
		if len(x) == 1 {
			return w / 2
		}
		return pad + float64(i)*(w-2*pad)/float64(len(x)-1)
	}
	py := func(y float64) float64 { return h - pad - (y-lo)/(hi-lo)*(h-2*pad) }
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><figcaption>%s</figcaption><svg width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg">`, html.EscapeString(title), w, h, w, h)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999"/>`, pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	fmt.Fprintf(&b, `<text x="4" y="%.0f" font-size="10">%.3g</text><text x="4" y="%.0f" font-size="10">%.3g</text>`, py(hi)+4, hi, py(lo)+4, lo)
	for i, xv := range x {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%d</text>`, px(i), h-pad+14, xv)
	}
	k := 0
	for _, name := range sortedStrings(series) {
		ys := series[name]
		c := colors[k%len(colors)]
		var pts []string
		for i, y := range ys {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s step %d: %.4g</title></circle>`, px(i), py(y), c, html.EscapeString(name), x[i], y)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="11" fill="%s">%s</text>`, w-pad-110, 14+14*k, c, html.EscapeString(name))
		k++
	}
	b.WriteString("</svg></figure>")
	return b.String()
}

func renderHTML(rep workflows.CampaignReportData, n ReportNumbers) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><meta charset=utf-8><title>t1flow campaign %s</title>", html.EscapeString(n.Campaign))
	b.WriteString(`<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}figure{display:inline-block;margin:8px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>`)
	fmt.Fprintf(&b, "<h1>Campaign %s</h1><p>%d PPO steps; critic EV cold %s, warm %s; left out of training: %d aborted, %d failed, %d stale; tampered (trained on at reward 0): %d.</p>",
		html.EscapeString(n.Campaign), len(n.Steps), fmtEV(n.ColdEV), fmtEV(n.WarmEV), n.Excluded["aborted"], n.Excluded["failed"], n.Excluded["stale"], n.Tampered)
	if n.WarmupGate != "" {
		fmt.Fprintf(&b, "<p>Critic warm-up gate: %s.</p>", html.EscapeString(n.WarmupGate))
	}
	retried, most := 0, 0
	for i := range n.Retried {
		retried, most = retried+n.Retried[i], max(most, n.RetriesMax[i])
	}
	if retried > 0 {
		fmt.Fprintf(&b, "<p>%d samples were started again after an R3 abort (routing missing); at most %d retries for one sample.</p>", retried, most)
	}
	b.WriteString(lineChart("mean reward and resolved rate per PPO step", n.Steps, map[string][]float64{"reward": n.Reward, "resolved": n.Resolved}))
	b.WriteString(lineChart("critic explained variance per step", n.Steps, map[string][]float64{"EV": n.EV}))
	b.WriteString(lineChart("train–inference log-prob gap", n.Steps, map[string][]float64{"with R3": n.GapReplay, "without R3": n.GapFree}))
	b.WriteString(lineChart("mean turns per rollout", n.Steps, map[string][]float64{"turns": n.Turns}))
	b.WriteString("<h2>Evals per checkpoint</h2><table><tr><th>checkpoint</th><th>policy</th><th>resolved</th><th>mean reward</th><th>mean turns</th><th>rollouts</th></tr>")
	for _, e := range rep.State.Evals {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%.1f%%</td><td>%.3f</td><td>%.1f</td><td>%d</td></tr>", html.EscapeString(e.Label), html.EscapeString(e.WeightVersion),
			100*e.Summary.ResolvedRate, e.Summary.MeanReward, e.Summary.MeanTurns, e.Summary.Rollouts)
	}
	b.WriteString("</table>")
	var x []int
	var rr, mr []float64
	for i, e := range rep.State.Evals {
		x = append(x, i)
		rr, mr = append(rr, e.Summary.ResolvedRate), append(mr, e.Summary.MeanReward)
	}
	b.WriteString(lineChart("eval results per checkpoint (x: checkpoint index in the table)", x, map[string][]float64{"resolved rate": rr, "mean reward": mr}))
	return b.String()
}
