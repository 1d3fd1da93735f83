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
	"slices"
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
	bars := fs.Bool("bars", false, "check the learning bars (docs/learning.md): exit 1 when one is missed")
	storeDir := fs.String("store", config.StoreDir(), "artifact store")
	const usage = "usage: starter report CAMPAIGN (--html FILE | --json | --bars)"
	name, err := parseOne(fs, args, usage)
	if err != nil {
		return err
	}
	if *out == "" && !*asJSON && !*bars {
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
	if *bars {
		b := DefaultBars
		if g := rep.Config.CriticWarmup.EVGate; g > 0 {
			b.WarmEV = g
		}
		return printBars(stdout, name, checkBars(nums, b))
	}
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
	Campaign  string    `json:"campaign"`
	Steps     []int     `json:"steps"`
	Reward    []float64 `json:"reward_mean"`
	Resolved  []float64 `json:"resolved_rate"`      // per step: share of trained rollouts resolved
	EV        floats    `json:"explained_variance"` // per step; null where undefined (every return equal)
	CeilingEV floats    `json:"ceiling_ev"`         // per step: the answer-prefix ceiling on the step's rollouts
	GapReplay floats    `json:"logprob_gap_replay"`
	GapFree   floats    `json:"logprob_gap_noreplay"`
	Turns     []float64 `json:"mean_turns"`
	ColdEV    *float64  `json:"cold_ev,omitempty"`
	WarmEV    *float64  `json:"warm_ev,omitempty"`
	// WarmCeiling is the most EV any value that reads only the answer so far
	// reaches on WarmEV's round: WarmEV's bound unless the critic reads the prompt.
	WarmCeiling *float64         `json:"warm_ceiling_ev,omitempty"`
	WarmupGate  string           `json:"warmup_gate,omitempty"` // how the critic warm-up gate was decided
	Evals       []map[string]any `json:"evals"`
	Excluded    map[string]int   `json:"excluded"`
	// Tampered counts PPO-step rollouts refused for tampering (trained on
	// at reward 0); each eval's count is in its "tampered".
	Tampered   int              `json:"tampered"`
	StepTamper []int            `json:"tampered_per_step"`
	Checkpoint []string         `json:"checkpoints"`
	Metrics    []map[string]any `json:"metrics"`
	// Per step: samples started again after an R3 abort, and the most retries one took.
	Retried    []int `json:"retried"`
	RetriesMax []int `json:"retries_max"`
	// Retention is what checkpoints.keep_last deleted from the store (nil: nothing).
	Retention *workflows.Retention `json:"checkpoint_retention,omitempty"`
	// Timing of the PPO phase (nil for campaigns from before it was recorded).
	Timing *PPOTiming `json:"ppo_timing,omitempty"`
	// Oversampling per step (nil without ppo.oversample).
	Oversample *OversampleNumbers `json:"oversample,omitempty"`
}

// OversampleNumbers are, per PPO step under ppo.oversample, the rollouts
// handed on to the next step, those handed in that trained or were stale,
// the samples dropped, and the turns of trained against finished rollouts
// (mean and p90); CarriedDropped the carried rollouts cancelled because a
// step failed or was sampled again.
type OversampleNumbers struct {
	Carried        []int     `json:"carried"`
	CarriedIn      []int     `json:"carried_in"`
	CarriedStale   []int     `json:"carried_stale"`
	Dropped        []int     `json:"dropped"`
	TrainedTurns   []float64 `json:"trained_turns_mean"`
	TrainedP90     []int     `json:"trained_turns_p90"`
	FinishedTurns  []float64 `json:"finished_turns_mean"`
	FinishedP90    []int     `json:"finished_turns_p90"`
	CarriedDropped int       `json:"carried_dropped"`
}

func oversampleNumbers(rep workflows.CampaignReportData) *OversampleNumbers {
	if rep.Config.PPO.Oversample == 0 {
		return nil
	}
	o := &OversampleNumbers{CarriedDropped: rep.State.CarriedDropped}
	for _, s := range rep.State.Steps {
		_, tm, tp := workflows.TurnStats(s.TurnsTrained)
		_, fm, fp := workflows.TurnStats(s.TurnsFinished)
		o.Carried, o.CarriedIn, o.CarriedStale, o.Dropped = append(o.Carried, s.Carried), append(o.CarriedIn, s.CarriedIn), append(o.CarriedStale, s.CarriedStale), append(o.Dropped, s.Dropped)
		o.TrainedTurns, o.TrainedP90, o.FinishedTurns, o.FinishedP90 = append(o.TrainedTurns, tm), append(o.TrainedP90, tp), append(o.FinishedTurns, fm), append(o.FinishedP90, fp)
	}
	return o
}

// PPOTiming is where the PPO phase's wall time went: the trainer's share
// busy in ppo_step and the rollouts' share busy collecting (over the phase,
// with checkpoint loads and evals). Started ahead counts the steps whose
// rollouts ran while the step before trained (ppo.max_staleness > 0).
type PPOTiming struct {
	WallSeconds    float64 `json:"wall_seconds"`
	TrainSeconds   float64 `json:"train_seconds"`
	CollectSeconds float64 `json:"collect_seconds"`
	TrainerBusy    float64 `json:"trainer_busy_share"`
	RolloutsBusy   float64 `json:"rollouts_busy_share"`
	StartedAhead   int     `json:"started_ahead"`
}

func ppoTiming(st workflows.CampaignState) *PPOTiming {
	if st.PPOStarted.IsZero() || !st.PPOEnded.After(st.PPOStarted) {
		return nil
	}
	t := &PPOTiming{WallSeconds: st.PPOEnded.Sub(st.PPOStarted).Seconds()}
	for _, s := range st.Steps {
		t.TrainSeconds += s.TrainSeconds
		t.CollectSeconds += s.CollectSeconds
		if s.Ahead {
			t.StartedAhead++
		}
	}
	t.TrainerBusy, t.RolloutsBusy = t.TrainSeconds/t.WallSeconds, t.CollectSeconds/t.WallSeconds
	return t
}

func metric(m map[string]any, k string) float64 {
	if f, ok := m[k].(float64); ok {
		return f
	}
	return math.NaN()
}

func reportNumbers(rep workflows.CampaignReportData) ReportNumbers {
	n := ReportNumbers{Campaign: rep.Config.Name, ColdEV: rep.State.ColdEV, WarmEV: rep.State.WarmEV, WarmCeiling: rep.State.WarmCeiling, WarmupGate: rep.State.WarmupGate,
		Excluded: map[string]int{"aborted": rep.State.Aborted, "failed": rep.State.Failed, "stale": rep.State.Stale, "refused": rep.State.Refused}, Retention: rep.State.Retention,
		Timing: ppoTiming(rep.State), Oversample: oversampleNumbers(rep)}
	for _, s := range rep.State.Steps {
		n.Steps = append(n.Steps, s.Step)
		n.Reward = append(n.Reward, s.RewardMean)
		n.Resolved = append(n.Resolved, s.ResolvedRate)
		n.EV = append(n.EV, metric(s.Metrics, "explained_variance"))
		n.CeilingEV = append(n.CeilingEV, metric(s.Metrics, "ceiling_ev"))
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
	return n
}

// floats is a series whose undefined points (NaN) are null in JSON, which
// has no NaN, and no point in the plots.
type floats []float64

func (xs floats) MarshalJSON() ([]byte, error) {
	out := make([]*float64, len(xs))
	for i := range xs {
		if !math.IsNaN(xs[i]) && !math.IsInf(xs[i], 0) {
			out[i] = &xs[i]
		}
	}
	return json.Marshal(out)
}

func renderHTML(rep workflows.CampaignReportData, n ReportNumbers) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><meta charset=utf-8><title>t1flow campaign %s</title>", html.EscapeString(n.Campaign))
	b.WriteString(`<style>body{font-family:sans-serif;max-width:960px;margin:2em auto}figure{display:inline-block;margin:8px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}</style>`)
	fmt.Fprintf(&b, "<h1>Campaign %s</h1><p>%d PPO steps; critic EV cold %s, warm %s; left out of training: %d aborted, %d failed, %d stale, %d in batches a step refused; tampered (trained on at reward 0): %d.</p>",
		html.EscapeString(n.Campaign), len(n.Steps), fmtEV(n.ColdEV), fmtEV(n.WarmEV), n.Excluded["aborted"], n.Excluded["failed"], n.Excluded["stale"], n.Excluded["refused"], n.Tampered)
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
	if r := n.Retention; r != nil {
		fmt.Fprintf(&b, "<p>Checkpoint retention (checkpoints.keep_last = %d): %d step checkpoints deleted from the store (%.2f GB freed), %d kept as pinned.</p>",
			rep.Config.Checkpoints.KeepLast, len(r.Deleted), float64(r.BytesFreed)/1e9, len(r.Pinned))
	}
	if t := n.Timing; t != nil {
		fmt.Fprintf(&b, "<p>PPO phase: %.0f s; the trainer was busy in ppo_step %.0f%% of it, the rollouts collecting %.0f%%; %d of %d steps started ahead (max_staleness %d).</p>",
			t.WallSeconds, 100*t.TrainerBusy, 100*t.RolloutsBusy, t.StartedAhead, len(n.Steps), rep.Config.PPO.MaxStaleness)
	}
	if o := n.Oversample; o != nil {
		fmt.Fprintf(&b, "<p>Oversampling (ppo.oversample = %d): per step, rollouts carried on %v, carried in and trained %v, carried in stale %v, samples dropped %v; %d carried rollouts cancelled with a failed step.</p>",
			rep.Config.PPO.Oversample, o.Carried, o.CarriedIn, o.CarriedStale, o.Dropped, o.CarriedDropped)
	}
	steps := stepTicks(n.Steps)
	b.WriteString(chart{Title: "mean reward and resolved rate per PPO step (its own rollouts)", XLabel: "PPO step", YLabel: "rate (0-1)",
		X: steps, Series: map[string][]float64{"reward": n.Reward, "resolved": n.Resolved}, Rates: true}.svg())
	b.WriteString(evChart(n))
	b.WriteString(chart{Title: "train-inference log-prob gap", XLabel: "PPO step", YLabel: "mean |Δ log-prob|", X: steps,
		Series: map[string][]float64{"with R3": n.GapReplay, "without R3": n.GapFree}}.svg())
	b.WriteString(chart{Title: "mean turns per rollout", XLabel: "PPO step", YLabel: "turns", X: steps, Series: map[string][]float64{"turns": n.Turns}}.svg())
	if o := n.Oversample; o != nil {
		p90 := func(xs []int) []float64 {
			var out []float64
			for _, x := range xs {
				out = append(out, float64(x))
			}
			return out
		}
		b.WriteString(chart{Title: "turns of trained against finished rollouts (oversampling)", XLabel: "PPO step", YLabel: "turns", X: steps,
			Series: map[string][]float64{"trained mean": o.TrainedTurns, "finished mean": o.FinishedTurns, "trained p90": p90(o.TrainedP90), "finished p90": p90(o.FinishedP90)}}.svg())
	}
	b.WriteString("<h2>Evals per checkpoint</h2><table><tr><th>checkpoint</th><th>policy</th><th>resolved</th><th>mean reward</th><th>mean turns</th><th>rollouts</th></tr>")
	for _, e := range rep.State.Evals {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%.1f%%</td><td>%.3f</td><td>%.1f</td><td>%d</td></tr>", html.EscapeString(e.Label), html.EscapeString(e.WeightVersion),
			100*e.Summary.ResolvedRate, e.Summary.MeanReward, e.Summary.MeanTurns, e.Summary.Rollouts)
	}
	b.WriteString("</table>")
	var x []string
	var rr, mr []float64
	for _, e := range rep.State.Evals {
		x = append(x, e.Label)
		rr, mr = append(rr, e.Summary.ResolvedRate), append(mr, e.Summary.MeanReward)
	}
	b.WriteString(chart{Title: "evals per checkpoint", XLabel: "checkpoint", YLabel: "rate (0-1)", X: x,
		Series: map[string][]float64{"resolved rate": rr, "mean reward": mr}, Rates: true}.svg())
	return b.String()
}

// evChart is the critic's explained variance: cold (the untrained critic on
// the first warm-up rollouts), warm (on rollouts it was not fitted on), then
// each PPO step's (the critic before the step, on the step's fresh rollouts).
func evChart(n ReportNumbers) string {
	x := append([]string{"cold", "warm"}, stepTicks(n.Steps)...)
	ev := []float64{math.NaN(), math.NaN()}
	if n.ColdEV != nil {
		ev[0] = *n.ColdEV
	}
	if n.WarmEV != nil {
		ev[1] = *n.WarmEV
	}
	ev = append(ev, n.EV...)
	// The answer-prefix ceiling: the most any value reading only the answer so far explains.
	top := []float64{math.NaN(), math.NaN()}
	if n.WarmCeiling != nil {
		top[1] = *n.WarmCeiling
	}
	top = append(top, n.CeilingEV...)
	series := map[string][]float64{"EV": ev}
	if slices.ContainsFunc(top, func(x float64) bool { return !math.IsNaN(x) }) {
		series["answer-prefix ceiling"] = top
	}
	return chart{Title: "critic explained variance: warm-up, then per PPO step (below -1 drawn at -1)", XLabel: "warm-up / PPO step",
		YLabel: "explained variance", X: x, Series: series, Fixed: true, Lo: -1, Hi: 1}.svg()
}
