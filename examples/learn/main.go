// Command learn writes the write-hello task family that examples/campaigns/learn.toml
// trains on: OUT/train/<name>/ (the training pool) and OUT/heldout/<name>/
// (held-out variants, never trained on). See docs/learning.md.
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
	train := flag.Int("train", 64, "training variants")
	held := flag.Int("heldout", 16, "held-out variants")
	seed := flag.Int64("seed", 1, "which words")
	flag.Parse()
	tr, ho, err := family.Hello{Train: *train, HeldOut: *held, Seed: *seed}.Write(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "learn:", err)
		os.Exit(1)
	}
	fmt.Printf("write-hello family: %d training tasks in %s/train, %d held-out in %s/heldout\n", len(tr), *out, len(ho), *out)
}
