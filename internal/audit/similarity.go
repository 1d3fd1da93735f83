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
