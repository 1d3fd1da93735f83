package harborout

import (
	"fmt"
	"slices"
)

// passAtK is harbor.utils.pass_at_k for one evals key, as Harbor computes
// it (which differs from t1flow's eval table on purpose: this is what a
// Harbor reader of the job expects): over trials with a valid reward only,
// none at all when any reward is not 0 or 1 or a trial has several, for
// k = 2, 4, 8, ... and 5, 10, 15, ... up to the fewest valid trials any task
// has.
func passAtK(trials []Trial) map[string]float64 {
	byTask := map[string][]int{}
	var order []string
	for _, t := range trials {
		rd := t.RewardDict()
		if rd == nil {
			continue
		}
		if len(rd) != 1 {
			return map[string]float64{} // several named rewards: Harbor gives none
		}
		var v float64
		for _, x := range rd {
			v = x
		}
		if v != 0 && v != 1 {
			return map[string]float64{}
		}
		if _, ok := byTask[t.TaskName]; !ok {
			order = append(order, t.TaskName)
		}
		byTask[t.TaskName] = append(byTask[t.TaskName], int(v))
	}
	out := map[string]float64{}
	if len(byTask) == 0 {
		return out
	}
	minN := -1
	for _, s := range byTask {
		if minN < 0 || len(s) < minN {
			minN = len(s)
		}
	}
	var ks []int
	for k := 2; k <= minN; k *= 2 {
		ks = append(ks, k)
	}
	for k := 5; k <= minN; k += 5 {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		sum := 0.0
		for _, name := range order {
			s := byTask[name]
			c := 0
			for _, x := range s {
				c += x
			}
			sum += passAtKTask(len(s), c, k)
		}
		out[fmt.Sprint(k)] = sum / float64(len(byTask))
	}
	return out
}

// passAtKTask is 1 - C(n-c, k)/C(n, k) as Harbor's product computes it.
func passAtKTask(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := 0; i < k; i++ {
		p *= float64(n-c-i) / float64(n-i)
	}
	return 1 - p
}
