package workflows

import (
	"fmt"
	"math"
	"strings"
)

// Summarize aggregates rollouts (Summary says what each figure is over).
func Summarize(rs []RolloutResult) Summary {
	s := Summary{
		Outcomes: map[string]int{}, AgentEnds: map[string]int{},
		ByCategory: map[string]Group{}, ByDifficulty: map[string]Group{},
	}
	var reward, harbor, turns, dur float64
	add := func(m map[string]Group, key string, r RolloutResult) {
		if key == "" {
			key = "(none)"
		}
		g := m[key]
		g.Rollouts++
		if r.Scored {
			g.Scored++
			g.MeanReward += r.Reward
			if r.Resolved {
				g.Resolved++
			}
		}
		m[key] = g
	}
	for _, r := range rs {
		s.Rollouts++
		s.Outcomes[r.Outcome]++
		if r.Outcome == OutcomeTampered {
			s.Tampered++
		}
		if r.Scored && r.Disagreement != "" {
			s.Disagreements++
		}
		if r.AgentEnd != "" {
			s.AgentEnds[r.AgentEnd]++
		}
		s.SandboxRetries += max(r.SandboxAttempts-1, 0)
		turns += float64(r.Turns)
		dur += r.DurationSec
		harbor += HarborRewardOf(r)
		if r.Scored {
			s.Scored++
			reward += r.Reward
			if r.Resolved {
				s.Resolved++
			}
		}
		add(s.ByCategory, r.Category, r)
		add(s.ByDifficulty, r.Difficulty, r)
		if len(r.PolicyVersions) > 0 {
			if s.PolicyVersions == nil {
				s.PolicyVersions = map[string]int{}
			}
			s.PolicyVersions[strings.Join(r.PolicyVersions, "+")]++
		}
	}
	s.Unscored = s.Rollouts - s.Scored
	if s.Scored > 0 {
		s.ScoredResolvedRate = float64(s.Resolved) / float64(s.Scored)
		s.MeanReward = reward / float64(s.Scored)
	}
	if s.Rollouts > 0 {
		s.ResolvedRate = float64(s.Resolved) / float64(s.Rollouts)
		s.HarborMeanReward = harbor / float64(s.Rollouts)
		s.MeanTurns = turns / float64(s.Rollouts)
		s.MeanDurationS = dur / float64(s.Rollouts)
	}
	for _, m := range []map[string]Group{s.ByCategory, s.ByDifficulty} {
		for _, k := range sortedKeys(m) {
			g := m[k]
			if g.Scored > 0 {
				g.MeanReward /= float64(g.Scored)
			}
			g.ResolvedRate = float64(g.Resolved) / float64(g.Rollouts)
			m[k] = g
		}
	}
	s.PassAtK = PassAtK(rs)
	return s
}

// HarborRewardOf is a rollout's reward as Harbor's mean counts it: the task's
// reward file, else 1 or 0 by resolution; 0 when unscored.
func HarborRewardOf(r RolloutResult) float64 {
	switch {
	case !r.Scored:
		return 0
	case r.HarborReward != nil:
		return *r.HarborReward
	case r.Resolved:
		return 1
	}
	return 0
}

// PassAtK is pass@k over tasks (the unbiased estimator 1 - C(n-c, k)/C(n, k)
// per task, averaged), for k = 1 and powers of two up to the fewest attempts
// any task had. An unscored attempt is a failure, as in the headline rate.
func PassAtK(rs []RolloutResult) map[string]float64 {
	n, c := map[string]int{}, map[string]int{}
	for _, r := range rs {
		n[r.TaskID]++
		if r.Scored && r.Resolved {
			c[r.TaskID]++
		}
	}
	if len(n) == 0 {
		return nil
	}
	minN := math.MaxInt
	for _, id := range sortedKeys(n) {
		minN = min(minN, n[id])
	}
	out := map[string]float64{}
	for k := 1; k <= minN; k *= 2 {
		sum := 0.0
		for _, id := range sortedKeys(n) {
			sum += passAtK(n[id], c[id], k)
		}
		out[fmt.Sprint(k)] = sum / float64(len(n))
	}
	return out
}

// passAtK is 1 - C(n-c, k)/C(n, k), as a product to stay exact for large n.
func passAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}
