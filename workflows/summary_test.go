package workflows

import (
	"math"
	"testing"
)

// TestSummaryCountsUnscoredAsZero: the headline resolved rate is over every
// rollout (Harbor's mean counts a missing reward as 0), the excluded are
// shown beside it, and Harbor's mean reward reads the reward file.
func TestSummaryCountsUnscoredAsZero(t *testing.T) {
	half := 0.5
	rs := []RolloutResult{
		{TaskID: "a", Scored: true, Resolved: true, Outcome: OutcomeResolved, Reward: 0.25},
		{TaskID: "a", Scored: true, Resolved: false, Outcome: OutcomeUnresolved, HarborReward: &half},
		{TaskID: "b", Scored: false, Outcome: OutcomeVerifierError},
		{TaskID: "b", Scored: false, Outcome: OutcomeInfraError},
	}
	s := Summarize(rs)
	if s.ResolvedRate != 0.25 || s.ScoredResolvedRate != 0.5 || s.Unscored != 2 || s.Scored != 2 {
		t.Fatalf("rate %v (scored %v), unscored %d", s.ResolvedRate, s.ScoredResolvedRate, s.Unscored)
	}
	if s.HarborMeanReward != (1+0.5)/4 {
		t.Fatalf("harbor mean %v, want 0.375", s.HarborMeanReward)
	}
	if g := s.ByCategory["(none)"]; g.ResolvedRate != 0.25 {
		t.Fatalf("group rate %v", g.ResolvedRate)
	}
	// pass@1 = mean per-task success rate: a 1/2, b 0/2; pass@2: a 1, b 0.
	if s.PassAtK["1"] != 0.25 || s.PassAtK["2"] != 0.5 || len(s.PassAtK) != 2 {
		t.Fatalf("pass@k %v", s.PassAtK)
	}
}

func TestPassAtKEstimator(t *testing.T) {
	// n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
	if got := passAtK(5, 2, 2); math.Abs(got-0.7) > 1e-12 {
		t.Fatalf("pass@2 of 2/5 = %v, want 0.7", got)
	}
	if passAtK(4, 0, 2) != 0 || passAtK(4, 3, 2) != 1 || math.Abs(passAtK(3, 1, 1)-1.0/3) > 1e-12 {
		t.Fatal("edge cases")
	}
}
