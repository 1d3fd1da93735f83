package family

import (
	"fmt"
	"math/rand"
	"strconv"
)

// Product is the multiply family, for a pretrained model (SmolLM2): every
// variant asks for the product of a three-digit and a two-digit number in
// /app/o ("Write the product of 347 and 58 to the file /app/o."). The
// product always has five digits, so the write-hello verifier scores it as
// it scores a word: the file, each digit in place, the exact content (s = 7).
//
// The skill is a terminal agent's: compute with the shell rather than in
// the head. Half the SFT demonstrations do (echo $((347*58)) >/app/o), half
// write the product out (echo 20126 >/app/o). A small model learns both
// forms from them, and the written-out number is its own arithmetic, which
// a model of SmolLM2's size gets wrong nearly every time; the shell's is
// always right. So after SFT the policy earns full reward about as often as
// it chooses the shell, the choice is made by one token of its answer ($ or
// a digit after "echo "; StateForm moves it to the answer's first word), and
// the reward gap is large (1 against about 2/7): the
// shape PPO learns on a small budget, as on the write-hello family
// (docs/learning.md). What the demonstrations set is the choice, not how
// well a given model copies; a model that multiplies in its head gains
// nothing from PPO here and says so in its base and SFT evals.
//
// Training variants use SFT's sentence templates, held-out variants
// templates of their own; every variant draws its own numbers.
type Product struct {
	SFT, Train, HeldOut int
	Seed                int64
	// StateForm: the solution's analysis line names the form before the
	// command (ShellAnalysis or MentalAnalysis), so the answer's first word
	// makes the choice, instead of the token after "echo ", some 50 tokens
	// into SmolLM2's 76 (docs/learning.md, "The multiply family").
	StateForm bool
}

// The analysis of a StateForm solution: which arithmetic it uses.
const (
	ShellAnalysis  = "shell arithmetic"
	MentalAnalysis = "mental arithmetic"
)

var (
	productTemplates = []string{
		"Write the product of %[1]d and %[2]d to the file %[3]s.",
		"Create the file %[3]s containing %[1]d times %[2]d.",
		"Save %[1]d multiplied by %[2]d in %[3]s.",
		"The file %[3]s should hold the product of %[1]d and %[2]d.",
		"Multiply %[1]d by %[2]d and store the result in the file %[3]s.",
		"Compute %[1]d times %[2]d; %[3]s must contain the answer.",
		"Make %[3]s contain the product of %[1]d and %[2]d.",
		"What is %[1]d times %[2]d? Write the number to %[3]s.",
	}
	// ProductHeldOutTemplates index productTemplates: only held-out variants use them.
	ProductHeldOutTemplates = map[int]bool{5: true, 6: true}
)

// ProductExpr is the shell's arithmetic for a times b, as the solutions write it.
func ProductExpr(a, b int) string { return fmt.Sprintf("$((%d*%d))", a, b) }

// Variants returns the SFT, training and held-out variants. SFT variants
// come in pairs: the first of a pair computes with the shell, the second
// writes the product out, and both share a wording, prefix and suffix, so
// that no wording is shown with one form more often than the other (a first
// version drew SFT's wordings at random: SmolLM2 then chose the shell on 14
// of 16 warm-up rollouts on the training wordings and 5 of 12 held out, and
// PPO had little left to learn). An odd SFT count's last variant computes.
// Training and held-out variants' solutions compute with the shell. No two
// variants, in any set, multiply the same numbers.
func (p Product) Variants() (sft, train, heldOut []Variant) {
	r := rand.New(rand.NewSource(p.Seed))
	trainT, heldT := splitTemplates(len(productTemplates), ProductHeldOutTemplates)
	sftOrder := make([]int, len(trainT))
	for i, j := range r.Perm(len(trainT)) {
		sftOrder[i] = trainT[j]
	}
	seen := map[[2]int]bool{}
	gen := func(kind string, n int, templates []int, pairs bool) []Variant {
		out := make([]Variant, 0, n)
		var t, pre, suf, num int
		for len(out) < n {
			// 200..999 times 50..99: 10000..98901, five digits.
			a, b := 200+r.Intn(800), 50+r.Intn(50)
			if seen[[2]int{a, b}] {
				continue
			}
			seen[[2]int{a, b}] = true
			literal := pairs && len(out)%2 == 1
			if !literal { // a pair's second variant keeps the first's wording
				t = templates[r.Intn(len(templates))]
				if pairs {
					t = sftOrder[(len(out)/2)%len(sftOrder)]
				}
				pre, suf, num = r.Intn(len(helloPrefixes)), r.Intn(len(helloSuffixes)), 10+r.Intn(9990)
			}
			v := Variant{
				Name: fmt.Sprintf("%s-%03d-%dx%d-t%d", kind, len(out), a, b, t), Word: strconv.Itoa(a * b),
				Instruction: fill(helloPrefixes[pre], num) + fmt.Sprintf(productTemplates[t], a, b, OutFile) + fill(helloSuffixes[suf], num),
				Expr:        ProductExpr(a, b), Category: "multiply",
			}
			if literal {
				v.Expr = ""
			}
			if p.StateForm {
				v.Analysis = ShellAnalysis
				if literal {
					v.Analysis = MentalAnalysis
				}
			}
			out = append(out, v)
		}
		return out
	}
	return gen("sft", p.SFT, trainT, true), gen("train", p.Train, trainT, false), gen("heldout", p.HeldOut, heldT, false)
}

// Write generates the family under dir as Hello.Write does.
func (p Product) Write(dir string) (sft, train, heldOut []string, err error) {
	sv, tv, hv := p.Variants()
	return writeSets(dir, sv, tv, hv)
}
