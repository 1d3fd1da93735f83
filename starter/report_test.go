package main

import (
	"strings"
	"testing"

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
	h := renderHTML(rep, n)
	if strings.Count(h, "<svg") != 5 || !strings.Contains(h, "log-prob gap") || !strings.Contains(h, "<td>final</td><td>v5</td><td>50.0%") {
		t.Fatalf("html:\n%s", h)
	}
}
