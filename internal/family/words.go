package family

import (
	"fmt"
	"math/rand"
)

// Words is the write-word family, for a pretrained model (SmolLM2): every
// variant asks for a five-letter word in /app/o, and the word is the
// instruction's ("Word: river. Put river into /app/o."), so the answer
// depends on the instruction: a policy earns reward only by reading it.
// Training and SFT variants ask for words of TrainWords, held-out variants
// for words of HeldOutWords, which no SFT or training variant ever names,
// on sentence templates no SFT or training variant uses either.
type Words struct {
	SFT, Train, HeldOut int
	Seed                int64
}

var (
	// TrainWords and HeldOutWords are disjoint, five letters each (the
	// verifier's HelloAssertions are fixed).
	TrainWords   = []string{"hello", "world", "apple", "river", "stone", "cloud", "green", "light", "table", "chair", "bread", "plant"}
	HeldOutWords = []string{"music", "ocean", "tiger", "happy", "smile", "dream"}
)

// Variants returns the SFT, training and held-out variants.
func (w Words) Variants() (sft, train, heldOut []Variant) {
	r := rand.New(rand.NewSource(w.Seed))
	trainT, heldT := templateSplit()
	seen := map[string]bool{}
	gen := func(kind string, n int, templates []int, words []string) []Variant {
		out := make([]Variant, 0, n)
		for len(out) < n {
			word := words[r.Intn(len(words))]
			t := templates[r.Intn(len(templates))]
			num := 10 + r.Intn(9990)
			text := "Word: " + word + ". " + fill(helloPrefixes[r.Intn(len(helloPrefixes))], num) +
				fmt.Sprintf(helloTemplates[t], word, OutFile) + fill(helloSuffixes[r.Intn(len(helloSuffixes))], num)
			if seen[text] {
				continue
			}
			seen[text] = true
			out = append(out, Variant{Name: fmt.Sprintf("%s-%s-%03d-t%d", word, kind, len(out), t), Word: word, Instruction: text})
		}
		return out
	}
	return gen("sft", w.SFT, trainT, TrainWords), gen("train", w.Train, trainT, TrainWords), gen("heldout", w.HeldOut, heldT, HeldOutWords)
}

// Write generates the family under dir as Hello.Write does.
func (w Words) Write(dir string) (sft, train, heldOut []string, err error) {
	sv, tv, hv := w.Variants()
	return writeSets(dir, sv, tv, hv)
}
