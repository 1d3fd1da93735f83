// Command learn writes the write-hello task family that examples/campaigns/learn.toml
// trains on (or, with -family words, the write-word family of
// examples/campaigns/smollm.toml, whose held-out words are never trained;
// with -family product, the multiply family of smollm-product.toml): OUT/sft/<name>/ (SFT demonstrations, hello and world),
// OUT/train/<name>/ (the PPO pool) and OUT/heldout/<name>/ (held-out
// variants, never trained on). See docs/learning.md.
//
//	go run ./examples/learn -out .t1flow/learn
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/t1flow/t1flow/internal/family"
)

func main() {
	out := flag.String("out", ".t1flow/learn", "directory to write train/ and heldout/ into")
	sft := flag.Int("sft", 32, "SFT variants (hello: half ask for world; product: half write the product out)")
	train := flag.Int("train", 64, "training variants")
	held := flag.Int("heldout", 16, "held-out variants")
	seed := flag.Int64("seed", 1, "which words")
	fam := flag.String("family", "hello", "hello (write-hello), words (write-word: the answer is the instruction's word) or product (multiply: compute with the shell or in the head)")
	state := flag.Bool("state-word", false, "hello: the SFT reply names the word in its analysis before the command; product: the arithmetic it uses (docs/learning.md)")
	check := flag.Bool("check", false, "hello: the solution reads the file back (cat /app/o) after writing it (docs/learning.md)")
	rlTemplates := flag.Bool("rl-templates", false, "words: the training (PPO) variants use wordings of their own, which no SFT variant uses (docs/learning.md)")
	flag.Parse()
	for name, set := range map[string]bool{"check": *check && *fam != "hello", "rl-templates": *rlTemplates && *fam != "words", "state-word": *state && *fam == "words"} {
		if set {
			fmt.Fprintf(os.Stderr, "learn: -%s does not apply to -family %s\n", name, *fam)
			os.Exit(2)
		}
	}
	var write func(string) ([]string, []string, []string, error)
	switch *fam {
	case "hello":
		write = family.Hello{SFT: *sft, Train: *train, HeldOut: *held, Seed: *seed, StateWord: *state, Check: *check}.Write
	case "words":
		write = family.Words{SFT: *sft, Train: *train, HeldOut: *held, Seed: *seed, RLTemplates: *rlTemplates}.Write
	case "product":
		write = family.Product{SFT: *sft, Train: *train, HeldOut: *held, Seed: *seed, StateForm: *state}.Write
	default:
		fmt.Fprintf(os.Stderr, "learn: -family %q: must be hello, words or product\n", *fam)
		os.Exit(2)
	}
	sf, tr, ho, err := write(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "learn:", err)
		os.Exit(1)
	}
	fmt.Printf("write-%s family: %d SFT tasks in %s/sft, %d training tasks in %s/train, %d held-out in %s/heldout\n",
		*fam, len(sf), *out, len(tr), *out, len(ho), *out)
}
