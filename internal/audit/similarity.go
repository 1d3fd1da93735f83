package audit

import (
	"hash/fnv"
	"regexp"
	"strings"
)

// Shingles are hashed word n-grams of a text, for near-duplicate and
// contamination checks.
func Shingles(text string, n int) map[uint64]bool {
	words := strings.Fields(strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9_/.-]+`).ReplaceAllString(text, " ")))
	out := map[uint64]bool{}
	for i := 0; i+n <= len(words); i++ {
		h := fnv.New64a()
		h.Write([]byte(strings.Join(words[i:i+n], " ")))
		out[h.Sum64()] = true
	}
	return out
}

// Jaccard similarity of two shingle sets.
func Jaccard(a, b map[uint64]bool) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 0
	}
	inter := 0
	for k := range a {
		if b[k] {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// Containment is the share of a's shingles found in b.
func Containment(a, b map[uint64]bool) float64 {
	if len(a) == 0 {
		return 0
	}
	n := 0
	for k := range a {
		if b[k] {
			n++
		}
	}
	return float64(n) / float64(len(a))
}

// Nearest is, for set i, the index of the set it is most like (-1: none)
// and how much.
type Nearest struct {
	Index int
	Score float64
}

// Similarities answers, for every set i, what comparing every pair would:
// Dup[i] is the earlier set j < i of highest Jaccard at or above dupMin (the
// first such j on a tie), Con[i] the eval set of highest containment of i
// at or above conMin (the first on a tie). It counts shared shingles through
// an index of which sets hold each shingle, so its cost follows the
// shingles sets share, not the number of pairs: a pool of tens of thousands
// of tasks, most sharing little, takes seconds where every pair took
// minutes. check, if not nil, is called once per set and stops the work
// when it returns an error.
func Similarities(sets, evals []map[uint64]bool, dupMin, conMin float64, check func(i int) error) (dup, con []Nearest, err error) {
	dup, con = make([]Nearest, len(sets)), make([]Nearest, len(sets))
	post := map[uint64][]int32{}
	evalPost := map[uint64][]int32{}
	for k, e := range evals {
		for s := range e {
			evalPost[s] = append(evalPost[s], int32(k))
		}
	}
	shared := make([]int32, len(sets)) // shingles set i shares with set j, for the current i
	evalShared := make([]int32, len(evals))
	var touched, evalTouched []int32
	for i, a := range sets {
		if check != nil {
			if err := check(i); err != nil {
				return nil, nil, err
			}
		}
		for s := range a {
			for _, j := range post[s] {
				if shared[j] == 0 {
					touched = append(touched, j)
				}
				shared[j]++
			}
			for _, k := range evalPost[s] {
				if evalShared[k] == 0 {
					evalTouched = append(evalTouched, k)
				}
				evalShared[k]++
			}
		}
		dup[i] = best(touched, shared, dupMin, func(j int32, n int32) float64 {
			return float64(n) / float64(len(a)+len(sets[j])-int(n))
		})
		con[i] = best(evalTouched, evalShared, conMin, func(_ int32, n int32) float64 {
			return float64(n) / float64(len(a))
		})
		touched, evalTouched = touched[:0], evalTouched[:0]
		for s := range a {
			post[s] = append(post[s], int32(i))
		}
	}
	return dup, con, nil
}

// best is the candidate of highest score at or above min, the lowest index
// on a tie, as a loop over every index in order keeping a strictly higher
// score would pick; it clears counts for the next set.
func best(cands, counts []int32, min float64, score func(j, n int32) float64) Nearest {
	out := Nearest{Index: -1}
	for _, j := range cands {
		x := score(j, counts[j])
		counts[j] = 0
		if x >= min && x > 0 && (x > out.Score || (x == out.Score && int(j) < out.Index)) {
			out = Nearest{Index: int(j), Score: x}
		}
	}
	return out
}
