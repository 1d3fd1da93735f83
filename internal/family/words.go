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
//
// With RLTemplates the training (PPO) variants use sentence templates of
// their own too, which no SFT variant uses (RLTemplates below): SFT then
// teaches the action on some wordings, PPO meets others, and the held-out
// evals a third set. A pretrained model after SFT writes the right action
// for nearly every SFT-worded task, so a PPO pool on SFT's wordings leaves
// it no return to learn from (docs/learning.md, "The real-model family").
type Words struct {
	SFT, Train, HeldOut int
	Seed                int64
	RLTemplates         bool
}

// RLTemplates index helloTemplates: with Words.RLTemplates only training
// variants use them. Both name the file before the word, as the held-out
// "Make %[2]s contain %[1]s." does, the wording SmolLM2 after SFT misread.
var RLTemplates = map[int]bool{1: true, 4: true}

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
	sftT := trainT
	if w.RLTemplates {
		var sftOnly, rlOnly []int
		for _, t := range trainT {
			if RLTemplates[t] {
				rlOnly = append(rlOnly, t)
			} else {
				sftOnly = append(sftOnly, t)
			}
		}
		sftT, trainT = sftOnly, rlOnly
	}
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
	return gen("sft", w.SFT, sftT, TrainWords), gen("train", w.Train, trainT, TrainWords), gen("heldout", w.HeldOut, heldT, HeldOutWords)
}

// Write generates the family under dir as Hello.Write does.
func (w Words) Write(dir string) (sft, train, heldOut []string, err error) {
	sv, tv, hv := w.Variants()
	return writeSets(dir, sv, tv, hv)
}
