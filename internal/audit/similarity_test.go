package audit

import (
	"math/rand"
	"testing"
)

// Similarities gives what comparing every pair gives (the loop it
// replaced), ties and thresholds included, on sets that share shingles in
// clusters, with a common core and with nothing.
func TestSimilaritiesMatchEveryPair(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	randomSet := func(base []uint64, keep float64, extra int) map[uint64]bool {
		s := map[uint64]bool{}
		for _, x := range base {
			if r.Float64() < keep {
				s[x] = true
			}
		}
		for i := 0; i < extra; i++ {
			s[r.Uint64()%5000] = true
		}
		return s
	}
	for round := 0; round < 20; round++ {
		var bases [][]uint64
		for b := 0; b < 5; b++ {
			var base []uint64
			for i := 0; i < 40; i++ {
				base = append(base, uint64(r.Intn(3000)))
			}
			bases = append(bases, base)
		}
		var sets, evals []map[uint64]bool
		for i := 0; i < 60; i++ {
			switch i % 6 {
			case 0:
				sets = append(sets, map[uint64]bool{}) // no shingles
			case 1:
				sets = append(sets, sets[len(sets)-1]) // an exact copy: a tie with what it copies
			default:
				sets = append(sets, randomSet(bases[r.Intn(len(bases))], 0.3+0.7*r.Float64(), r.Intn(10)))
			}
		}
		for k := 0; k < 4; k++ {
			evals = append(evals, randomSet(bases[r.Intn(len(bases))], 0.8, 5))
		}
		dupMin, conMin := []float64{0, 0.3, 0.85}[round%3], []float64{0, 0.2, 0.5}[round%3]
		dup, con, err := Similarities(sets, evals, dupMin, conMin, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range sets {
			want := Nearest{Index: -1}
			for j := 0; j < i; j++ {
				if x := Jaccard(sets[i], sets[j]); x >= dupMin && x > want.Score {
					want = Nearest{Index: j, Score: x}
				}
			}
			if dup[i] != want {
				t.Fatalf("round %d, set %d: duplicate %+v, every pair says %+v", round, i, dup[i], want)
			}
			want = Nearest{Index: -1}
			for k, e := range evals {
				if x := Containment(sets[i], e); x >= conMin && x > want.Score {
					want = Nearest{Index: k, Score: x}
				}
			}
			if con[i] != want {
				t.Fatalf("round %d, set %d: contamination %+v, every pair says %+v", round, i, con[i], want)
			}
		}
	}
}
