package family

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWordsHeldOutAnswersAreNeverTrained: every variant's answer is the word
// its instruction names, and no held-out word appears in any SFT or training
// instruction (nor any SFT or training word in a held-out one).
func TestWordsHeldOutAnswersAreNeverTrained(t *testing.T) {
	sft, train, held := Words{SFT: 40, Train: 80, HeldOut: 24, Seed: 3}.Variants()
	if len(sft) != 40 || len(train) != 80 || len(held) != 24 {
		t.Fatalf("%d %d %d variants", len(sft), len(train), len(held))
	}
	words := map[string]bool{}
	for _, v := range append(append([]Variant{}, sft...), train...) {
		if !strings.Contains(v.Instruction, "Word: "+v.Word+".") || len(v.Word) != len(Word) {
			t.Fatalf("%s: %q does not name %q", v.Name, v.Instruction, v.Word)
		}
		for _, h := range HeldOutWords {
			if strings.Contains(v.Instruction, h) {
				t.Fatalf("training variant %s names held-out word %q", v.Name, h)
			}
		}
		words[v.Word] = true
	}
	if len(words) < 6 {
		t.Fatalf("training variants use only %d words: the answer would not depend on the instruction", len(words))
	}
	for _, v := range held {
		if !strings.Contains(v.Instruction, "Word: "+v.Word+".") {
			t.Fatalf("%s: %q", v.Name, v.Instruction)
		}
		for _, w := range TrainWords {
			if strings.Contains(v.Instruction, w) {
				t.Fatalf("held-out variant %s names training word %q", v.Name, w)
			}
		}
	}
	dir := t.TempDir()
	_, _, hd, err := Words{SFT: 2, Train: 2, HeldOut: 2, Seed: 3}.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	sol, _ := os.ReadFile(filepath.Join(hd[0], "solution", "solve.sh"))
	ins, _ := os.ReadFile(filepath.Join(hd[0], "instruction.md"))
	word := strings.TrimSuffix(strings.TrimPrefix(strings.Fields(string(ins))[1], ""), ".")
	if !strings.Contains(string(sol), "echo "+word+" >") {
		t.Fatalf("solution %q does not write the instruction's word %q", sol, word)
	}
}

// TestWordsRLTemplatesAreTheirOwn: with RLTemplates, training variants use
// only RLTemplates' wordings, SFT variants none of them, and held-out
// variants neither set's; without it SFT and training share their wordings.
func TestWordsRLTemplatesAreTheirOwn(t *testing.T) {
	template := func(v Variant) int {
		i := strings.LastIndex(v.Name, "-t")
		n := 0
		for _, c := range v.Name[i+2:] {
			n = n*10 + int(c-'0')
		}
		return n
	}
	sft, train, held := Words{SFT: 40, Train: 40, HeldOut: 24, Seed: 3, RLTemplates: true}.Variants()
	used := map[string]map[int]bool{"sft": {}, "train": {}, "heldout": {}}
	for kind, vs := range map[string][]Variant{"sft": sft, "train": train, "heldout": held} {
		for _, v := range vs {
			used[kind][template(v)] = true
		}
	}
	for tpl := range used["train"] {
		if !RLTemplates[tpl] {
			t.Errorf("training variants use template %d, not one of RLTemplates %v", tpl, RLTemplates)
		}
	}
	for tpl := range used["sft"] {
		if RLTemplates[tpl] || HeldOutTemplates[tpl] {
			t.Errorf("SFT variants use template %d (RL or held-out)", tpl)
		}
	}
	for tpl := range used["heldout"] {
		if !HeldOutTemplates[tpl] {
			t.Errorf("held-out variants use template %d", tpl)
		}
	}
	if len(used["train"]) != len(RLTemplates) || len(used["sft"]) < 3 {
		t.Errorf("templates used: %v", used)
	}
	sft, train, _ = Words{SFT: 40, Train: 40, HeldOut: 4, Seed: 3}.Variants()
	inSFT, inTrain := false, false
	for _, v := range sft {
		inSFT = inSFT || RLTemplates[template(v)]
	}
	for _, v := range train {
		inTrain = inTrain || RLTemplates[template(v)]
	}
	if !inSFT || !inTrain {
		t.Errorf("without RLTemplates SFT (%v) and training (%v) variants should both use its templates", inSFT, inTrain)
	}
}
