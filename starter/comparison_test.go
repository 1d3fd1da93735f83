package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/workflows"
)

// TestComparisonCountsEveryRollout: the checkpoint table's RESOLVED is over
// every rollout, as its rate is (an unscored rollout counts as 0 and is
// shown beside it), and so are its groups; pass@k is listed.
func TestComparisonCountsEveryRollout(t *testing.T) {
	s := workflows.Summary{Rollouts: 4, Scored: 3, Unscored: 1, Resolved: 2, ResolvedRate: 0.5, ScoredResolvedRate: 2.0 / 3,
		PassAtK:    map[string]float64{"1": 0.5, "2": 0.75},
		ByCategory: map[string]workflows.Group{"games": {Rollouts: 4, Scored: 3, Resolved: 2, ResolvedRate: 0.5}}}
	var b bytes.Buffer
	printComparison(&b, []workflows.CheckpointEval{{Label: "c:final", WeightVersion: "v3", Summary: s}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table:\n%s", b.String())
	}
	head, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if head[3] != "UNSCORED" || row[2] != "2/4" || row[3] != "50.0%" || row[4] != "1" {
		t.Errorf("want RESOLVED 2/4 50.0%% and UNSCORED 1:\n%s", b.String())
	}
	for _, want := range []string{"pass@1 0.500, pass@2 0.750", "games 2/4"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("row lacks %q:\n%s", want, b.String())
		}
	}
}
