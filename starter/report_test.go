package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/workflows"
)

func TestReportRendersPlotsAndNumbers(t *testing.T) {
	ev := 0.7
	rep := workflows.CampaignReportData{}
	rep.Config.Name = "demo"
	rep.State.WarmEV = &ev
	for i := 1; i <= 3; i++ {
		rep.State.Steps = append(rep.State.Steps, workflows.StepRecord{Step: i, RewardMean: 0.1 * float64(i), MeanTurns: 3,
			Metrics: map[string]any{"explained_variance": 0.5, "logprob_gap_replay": 0.01, "logprob_gap_noreplay": 0.02}})
	}
	rep.State.Evals = []workflows.CheckpointEval{{Label: "base", WeightVersion: "v0", Summary: workflows.Summary{ResolvedRate: 0.25, Rollouts: 8}},
		{Label: "final", WeightVersion: "v5", Summary: workflows.Summary{ResolvedRate: 0.5, Rollouts: 8}}}
	n := reportNumbers(rep)
	if len(n.Steps) != 3 || n.Reward[2] < 0.29 || n.GapFree[0] != 0.02 || len(n.Evals) != 2 {
		t.Fatalf("numbers %+v", n)
	}
	if n.Retried[1] != 0 || n.RetriesMax[1] != 0 {
		t.Fatalf("retries without any: %v %v", n.Retried, n.RetriesMax)
	}
	h := renderHTML(rep, n)
	if strings.Contains(h, "R3 abort") {
		t.Fatal("the report mentions retries that never happened")
	}
	rep.State.Steps[1].Retries, rep.State.Steps[1].RetriesMax = []int{5, 2, 0, 1}, 3
	n = reportNumbers(rep)
	if n.Retried[1] != 3 || n.RetriesMax[1] != 3 {
		t.Fatalf("retried %v, max %v: want 3 samples retried in step 2, at most 3 times", n.Retried, n.RetriesMax)
	}
	h = renderHTML(rep, n)
	if !strings.Contains(h, "3 samples were started again after an R3 abort (routing missing); at most 3 retries") {
		t.Fatalf("html does not show the retries:\n%s", h)
	}
	var out strings.Builder
	printStatus(&out, workflows.CampaignStatus{Name: "demo", Recent: rep.State.Steps}, "campaign/demo")
	if !strings.Contains(out.String(), "step 2 (): 0/0 trained, reward 0.200, turns 3.0, 3 retried after aborts (samples by retries [5 2 0 1], max 3)") {
		t.Fatalf("status does not show the retries:\n%s", out.String())
	}
	if strings.Contains(out.String(), "max_staleness") {
		t.Fatalf("status shows staleness of an on-policy campaign:\n%s", out.String())
	}
	rep.State.Steps[2].MaxStaleness, rep.State.Steps[2].Staleness, rep.State.Steps[2].Stale = 1, []int{3, 1}, 2
	out.Reset()
	printStatus(&out, workflows.CampaignStatus{Name: "demo", Recent: rep.State.Steps}, "campaign/demo")
	if !strings.Contains(out.String(), "turns 3.0, trained by versions behind [3 1], 2 stale left out (max_staleness 1)") {
		t.Fatalf("status does not show the staleness:\n%s", out.String())
	}
	if strings.Contains(out.String(), "started ahead") {
		t.Fatalf("status shows a step started ahead that was not:\n%s", out.String())
	}
	rep.State.Steps[2].Ahead, rep.State.Steps[2].CollectSeconds, rep.State.Steps[2].WaitSeconds = true, 41, 12
	out.Reset()
	printStatus(&out, workflows.CampaignStatus{Name: "demo", Recent: rep.State.Steps}, "campaign/demo")
	if !strings.Contains(out.String(), "(max_staleness 1); started ahead: collected in 41 s while step 2 trained, then waited 12 s") {
		t.Fatalf("status does not show the step started ahead:\n%s", out.String())
	}
	for _, want := range []string{">PPO step</text>", ">rate (0-1)</text>", ">explained variance</text>", ">cold</text>", ">warm</text>"} {
		if !strings.Contains(h, want) {
			t.Errorf("html has no %q (axis labels, the EV plot's cold and warm points)", want)
		}
	}
	// The rate plots' axes are 0-1 whatever the data: 0 and 1 tick labels on each.
	for _, fig := range strings.Split(h, "<figure>") {
		if strings.Contains(fig, "mean reward and resolved rate") || strings.Contains(fig, "evals per checkpoint") {
			if !strings.Contains(fig, `text-anchor="end">1</text>`) || !strings.Contains(fig, `text-anchor="end">0</text>`) {
				t.Errorf("a rate plot is not on a fixed 0-1 axis:\n%s", fig)
			}
		}
	}
	if strings.Count(h, "<svg") != 5 || !strings.Contains(h, "log-prob gap") || !strings.Contains(h, "<td>final</td><td>v5</td><td>50.0%") {
		t.Fatalf("html:\n%s", h)
	}
}

// An undefined EV (every return in the step equal) is null in the JSON and a
// point missing from the plot, never 0; the answer-prefix ceiling is plotted beside EV.
func TestReportKeepsUndefinedEVUndefined(t *testing.T) {
	rep := workflows.CampaignReportData{}
	rep.Config.Name = "demo"
	warm, wb := 0.6, 0.7
	rep.State.WarmEV, rep.State.WarmCeiling = &warm, &wb
	rep.State.Steps = []workflows.StepRecord{{Step: 1, Metrics: map[string]any{"explained_variance": 0.5, "ceiling_ev": 0.75}},
		{Step: 2, Metrics: map[string]any{"explained_variance": nil}}}
	n := reportNumbers(rep)
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"explained_variance":[0.5,null]`, `"ceiling_ev":[0.75,null]`, `"warm_ceiling_ev":0.7`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json has no %s: %s", want, b)
		}
	}
	h := renderHTML(rep, n)
	if !strings.Contains(h, "answer-prefix ceiling") {
		t.Error("the EV plot has no ceiling series")
	}
	rep.State.WarmCeiling, rep.State.Steps[0].Metrics["ceiling_ev"] = nil, nil
	if h := renderHTML(rep, reportNumbers(rep)); strings.Contains(h, "answer-prefix ceiling") {
		t.Error("the EV plot draws a ceiling the campaign never measured")
	}
}

func TestReportCountsCheckpointRetention(t *testing.T) {
	rep := workflows.CampaignReportData{}
	rep.Config.Name, rep.Config.Checkpoints.KeepLast = "demo", 2
	if h := renderHTML(rep, reportNumbers(rep)); strings.Contains(h, "retention") {
		t.Fatal("the report mentions a retention that deleted nothing")
	}
	rep.State.Retention = &workflows.Retention{Deleted: []string{"demo/e/step-0001", "demo/e/step-0002"}, Pinned: []string{"demo/e/step-0003"}, BytesFreed: 2_150_000_000}
	n := reportNumbers(rep)
	if n.Retention == nil || len(n.Retention.Deleted) != 2 {
		t.Fatalf("numbers: retention %+v", n.Retention)
	}
	if h := renderHTML(rep, n); !strings.Contains(h, "checkpoints.keep_last = 2): 2 step checkpoints deleted from the store (2.15 GB freed), 1 kept as pinned") {
		t.Fatalf("html does not count the deletions:\n%s", h)
	}
}

// The PPO phase's timing: the trainer's and the rollouts' busy shares of
// its wall time, the steps started ahead; none for a campaign that did not
// record its phase's bounds.
func TestReportTimesThePPOPhase(t *testing.T) {
	rep := workflows.CampaignReportData{}
	rep.Config.Name, rep.Config.PPO.MaxStaleness = "demo", 1
	if n := reportNumbers(rep); n.Timing != nil {
		t.Fatalf("timing without the phase's bounds: %+v", n.Timing)
	}
	rep.State.PPOStarted = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	rep.State.PPOEnded = rep.State.PPOStarted.Add(100 * time.Second)
	rep.State.Steps = []workflows.StepRecord{{Step: 1, CollectSeconds: 30, TrainSeconds: 20}, {Step: 2, Ahead: true, CollectSeconds: 25, TrainSeconds: 20, WaitSeconds: 5}}
	n := reportNumbers(rep)
	if tm := n.Timing; tm == nil || tm.WallSeconds != 100 || tm.TrainerBusy != 0.4 || tm.RolloutsBusy != 0.55 || tm.StartedAhead != 1 {
		t.Fatalf("timing %+v: want 100 s, trainer 0.4, rollouts 0.55, 1 ahead", n.Timing)
	}
	if h := renderHTML(rep, n); !strings.Contains(h, "PPO phase: 100 s; the trainer was busy in ppo_step 40% of it, the rollouts collecting 55%; 1 of 2 steps started ahead (max_staleness 1).") {
		t.Fatalf("html does not show the PPO phase's timing:\n%s", h)
	}
}

// Under ppo.oversample the report has, per step, what was carried, adopted
// and dropped and the turns of trained against finished rollouts; none
// without it.
func TestReportShowsOversampling(t *testing.T) {
	rep := workflows.CampaignReportData{}
	rep.Config.Name, rep.Config.PPO.MaxStaleness = "demo", 1
	rep.State.Steps = []workflows.StepRecord{{Step: 1, Carried: 2, TurnsTrained: []int{0, 0, 0, 3}, TurnsFinished: []int{0, 0, 0, 3}},
		{Step: 2, Carried: 1, CarriedIn: 1, Dropped: 1, TurnsTrained: []int{0, 0, 0, 2, 0, 0, 1}, TurnsFinished: []int{0, 0, 0, 2, 0, 0, 1}}}
	if n := reportNumbers(rep); n.Oversample != nil || strings.Contains(renderHTML(rep, n), "Oversampling") {
		t.Fatalf("oversampling numbers without ppo.oversample: %+v", n.Oversample)
	}
	rep.Config.PPO.Oversample, rep.State.CarriedDropped = 2, 1
	n := reportNumbers(rep)
	o := n.Oversample
	if o == nil || fmt.Sprint(o.Carried, o.CarriedIn, o.Dropped, o.TrainedP90, o.FinishedTurns) != "[2 1] [0 1] [0 1] [3 6] [3 4]" || o.CarriedDropped != 1 {
		t.Fatalf("oversample numbers %+v", o)
	}
	if h := renderHTML(rep, n); !strings.Contains(h, "Oversampling (ppo.oversample = 2): per step, rollouts carried on [2 1], carried in and trained [0 1]") ||
		!strings.Contains(h, "turns of trained against finished rollouts") {
		t.Fatalf("html does not show oversampling:\n%s", h)
	}
}

// Status counts the recent steps' verifier errors, which trained at reward
// 0, as it counts tampering.
func TestStatusCountsVerifierErrorsTrainedAtZero(t *testing.T) {
	var out strings.Builder
	printStatus(&out, workflows.CampaignStatus{Name: "demo", Recent: []workflows.StepRecord{{Step: 1, VerifierErrors: 2}, {Step: 2, VerifierErrors: 1}}}, "campaign/demo")
	if !strings.Contains(out.String(), "verifier_error 3 in the recent steps") {
		t.Errorf("status does not count the verifier errors trained at 0:\n%s", out.String())
	}
}
