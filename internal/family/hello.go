// Package family generates task families: many variants of one small skill
// as Harbor task directories, split into variants to train on and held-out
// variants that no training stage ever sees.
package family

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
)

// Hello is the write-hello family: every variant asks for a word in the
// file /app/o, worded differently ("Word: hello. Put hello into /app/o.",
// "Word: hello. Task 812: Create the file /app/o containing the word hello.
// Use the shell."). The answer is one command; what varies is the
// instruction around it. Three sets:
//
//   - SFT variants ask for hello or, as often, for world: the demonstrations
//     teach the harness's action format and the command, and leave the word
//     to choose (the reference policy does not learn to read it from the
//     instruction in its SFT budget: docs/learning.md);
//   - training variants (PPO, critic warm-up) ask for hello;
//   - held-out variants ask for hello on sentence templates that no SFT or
//     training variant uses.
//
// So the SFT policy writes the wrong word about half the time, and the
// verifier's reward is what tells PPO which word the tasks it trains on ask for.
type Hello struct {
	SFT, Train, HeldOut int   // how many variants of each
	Seed                int64 // which variants, reproducibly
	// StateWord: the SFT reply names the word in its analysis before the
	// command ({"analysis":"hello","commands":[...]}), so the return is
	// decided by the answer's 14th token instead of its 34th (docs/learning.md,
	// "The critic").
	StateWord bool
	// Check: the reference solution reads the file back after writing it
	// (echo WORD >/app/o, then cat /app/o), so the SFT answer runs two
	// commands and the return, decided at the word, is known for every
	// token after it (docs/learning.md, "More tokens after the word").
	Check bool
}

const (
	// Word is what training and held-out variants ask for, Sibling what half
	// the SFT variants ask for instead, and OutFile where.
	Word    = "hello"
	Sibling = "world"
	OutFile = "/app/o"
)

var (
	helloTemplates = []string{
		"Write the word %[1]s to the file %[2]s.",
		"Create the file %[2]s containing the word %[1]s.",
		"Put %[1]s into %[2]s.",
		"Save the text %[1]s in %[2]s.",
		"The file %[2]s should hold the word %[1]s.",
		"Store the word %[1]s in the file %[2]s.",
		"Make %[2]s contain %[1]s.",
		"Echo %[1]s into the file %[2]s.",
	}
	// HeldOutTemplates index helloTemplates: only held-out variants use them.
	HeldOutTemplates = map[int]bool{2: true, 6: true}
	helloPrefixes    = []string{"", "Please: ", "Quick one. ", "Task %d: ", "Hi! ", "Next step: "}
	helloSuffixes    = []string{"", " Nothing else is needed.", " Use the shell.", " Keep it short.", " (ticket %d)", " Then you are done."}
)

// Variant is one task of the family.
type Variant struct {
	Name        string // directory name, unique in its set
	Word        string // what it asks for
	Instruction string
	Analysis    string // the SFT reply's analysis (harness.AnalysisMark); "" for none
	Check       bool   // the solution reads the file back (Hello.Check)
	// Expr is what the solution echoes when it is not Word itself: a shell
	// expression whose value is Word (Product: "$((347*58))"); "" for Word.
	Expr     string
	Category string // task.toml's metadata category; "" for write-hello
}

// Variants returns the SFT, training and held-out variants.
func (h Hello) Variants() (sft, train, heldOut []Variant) {
	r := rand.New(rand.NewSource(h.Seed))
	trainT, heldT := templateSplit()
	seen := map[string]bool{} // the same text would be the same task (its ID is a content hash)
	gen := func(kind string, n int, templates []int, words ...string) []Variant {
		out := make([]Variant, 0, n)
		for len(out) < n {
			w := words[len(out)%len(words)]
			t := templates[r.Intn(len(templates))]
			num := 10 + r.Intn(9990)
			text := "Word: " + w + ". " + fill(helloPrefixes[r.Intn(len(helloPrefixes))], num) +
				fmt.Sprintf(helloTemplates[t], w, OutFile) +
				fill(helloSuffixes[r.Intn(len(helloSuffixes))], num)
			text += " Ref: " + refCode(r, InstructionLen-len(text)-len(" Ref: "))
			if seen[text] {
				continue
			}
			seen[text] = true
			v := Variant{Name: fmt.Sprintf("%s-%s-%03d-t%d", w, kind, len(out), t), Word: w, Instruction: text, Check: h.Check}
			if h.StateWord {
				v.Analysis = w
			}
			out = append(out, v)
		}
		return out
	}
	return gen("sft", h.SFT, trainT, Word, Sibling), gen("train", h.Train, trainT, Word), gen("heldout", h.HeldOut, heldT, Word)
}

// templateSplit is which write-hello sentence templates training variants
// use and which only held-out variants do.
func templateSplit() (trainT, heldT []int) {
	return splitTemplates(len(helloTemplates), HeldOutTemplates)
}

// splitTemplates splits the indexes of n templates into those training
// variants use and those only held-out variants do.
func splitTemplates(n int, heldOut map[int]bool) (trainT, heldT []int) {
	for i := range n {
		if heldOut[i] {
			heldT = append(heldT, i)
		} else {
			trainT = append(trainT, i)
		}
	}
	return trainT, heldT
}

// InstructionLen is every variant's instruction length: a reference code
// pads it (the longest wording is 104 characters). Equal lengths put the answer at the same positions in every
// prompt, which the reference model (learned absolute position embeddings,
// 3M parameters) picks up in tens of SFT steps; with lengths that vary by
// 60 characters, 80 steps left its answers garbled (docs/learning.md).
const InstructionLen = 112

const refAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func refCode(r *rand.Rand, n int) string {
	b := make([]byte, max(n, 1))
	for i := range b {
		b[i] = refAlphabet[r.Intn(len(refAlphabet))]
	}
	return string(b)
}

func fill(s string, n int) string {
	if strings.Contains(s, "%d") {
		return fmt.Sprintf(s, n)
	}
	return s
}

// Write generates the family under dir: dir/sft/<name>/, dir/train/<name>/
// and dir/heldout/<name>/, one Harbor task each, and returns their directories.
func (h Hello) Write(dir string) (sft, train, heldOut []string, err error) {
	sv, tv, hv := h.Variants()
	return writeSets(dir, sv, tv, hv)
}

// writeSets writes the SFT, training and held-out variants under dir.
func writeSets(dir string, sv, tv, hv []Variant) (sft, train, heldOut []string, err error) {
	for _, set := range []struct {
		sub  string
		vs   []Variant
		dirs *[]string
	}{{"sft", sv, &sft}, {"train", tv, &train}, {"heldout", hv, &heldOut}} {
		for _, v := range set.vs {
			d := filepath.Join(dir, set.sub, v.Name)
			if err := writeHelloTask(d, v); err != nil {
				return nil, nil, nil, err
			}
			*set.dirs = append(*set.dirs, d)
		}
	}
	return sft, train, heldOut, nil
}

// HelloAssertions is how many assertions the verifier reports (a campaign's
// s, so that reward = passing share): the file exists, each of the five
// letters, and the exact content. Word and Sibling have five letters each.
const HelloAssertions = 2 + len(Word)

// WriteHelloTask writes one task asking for word into dir.
func WriteHelloTask(dir, word, instruction string) error {
	return writeHelloTask(dir, Variant{Word: word, Instruction: instruction})
}

// writeHelloTask writes v's task: its solution has the analysis line
// (harness.AnalysisMark) when v.Analysis is not "", and reads the file back
// when v.Check.
func writeHelloTask(dir string, v Variant) error {
	word, instruction := v.Word, v.Instruction
	if len(word) != len(Word) {
		return fmt.Errorf("write-hello: word %q must have %d letters (the verifier's assertions are fixed)", word, len(Word))
	}
	echo, category := word, "write-hello"
	if v.Expr != "" {
		echo = v.Expr
	}
	if v.Category != "" {
		category = v.Category
	}
	files := map[string]string{
		"instruction.md":         instruction + "\n",
		"task.toml":              fmt.Sprintf(helloTOML, category),
		"environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /app\n",
		"solution/solve.sh":      "#!/bin/bash\n" + analysisLine(v.Analysis) + fmt.Sprintf("echo %s >%s\n", echo, OutFile) + checkLine(v.Check),
		"tests/test.sh":          fmt.Sprintf(helloTest, word, OutFile),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile keeps an existing file's mode
			return err
		}
	}
	return nil
}

func checkLine(check bool) string {
	if !check {
		return ""
	}
	return "cat " + OutFile + "\n"
}

func analysisLine(analysis string) string {
	if analysis == "" {
		return ""
	}
	return "# analysis: " + analysis + "\n"
}

const helloTOML = `version = "1.0"

[metadata]
category = "%s"
difficulty = "easy"
tags = ["learn"]

[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0

[environment]
cpus = 0.5
memory_mb = 256
`

// helloTest is the verifier: bash builtins only (no pytest start-up), one
// CTRF assertion per check, so a near miss still earns most of the reward.
const helloTest = `#!/bin/bash
want=%[1]s
file=%[2]s
mkdir -p /logs/verifier
got=
exists=failed
if [ -f "$file" ]; then exists=passed; got=$(head -c 64 "$file"); fi
tests="{\"name\":\"$file exists\",\"status\":\"$exists\"}"
for ((i = 0; i < ${#want}; i++)); do
  st=failed; [ "${got:$i:1}" = "${want:$i:1}" ] && st=passed
  tests="$tests,{\"name\":\"letter $((i + 1)) is ${want:$i:1}\",\"status\":\"$st\"}"
done
st=failed; [ "$got" = "$want" ] && st=passed
tests="$tests,{\"name\":\"$file holds exactly $want\",\"status\":\"$st\"}"
printf '{"results":{"tests":[%%s]}}\n' "$tests" >/logs/verifier/ctrf.json
`
