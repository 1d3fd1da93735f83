package family

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
)

var productName = regexp.MustCompile(`^(sft|train|heldout)-(\d{3})-(\d+)x(\d+)-t(\d+)$`)

// productFactors reads a variant's numbers and wording from its name.
func productFactors(t *testing.T, name string) (a, b, tpl int) {
	t.Helper()
	m := productName.FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("variant name %q: want KIND-NNN-AxB-tT", name)
	}
	a, _ = strconv.Atoi(m[3])
	b, _ = strconv.Atoi(m[4])
	tpl, _ = strconv.Atoi(m[5])
	return a, b, tpl
}

// TestProductVariants: every variant's answer is the product of the two
// numbers its instruction names, five digits; SFT demonstrations come in
// pairs of one wording (the digits aside), the first computing with the
// shell and the second writing the product out, so each wording is shown
// as often one way as the other; training and held-out solutions compute
// it; held-out variants use wordings no other set does; no two variants
// multiply the same numbers.
func TestProductVariants(t *testing.T) {
	for _, n := range []int{40, 13} {
		sft, train, held := Product{SFT: n, Train: 60, HeldOut: 20, Seed: 5}.Variants()
		if len(sft) != n || len(train) != 60 || len(held) != 20 {
			t.Fatalf("%d %d %d variants", len(sft), len(train), len(held))
		}
		literal := 0
		forms := map[int][2]int{} // SFT wording: [shell, written out]
		pairs := map[[2]int]string{}
		digits := regexp.MustCompile(`[0-9]+`)
		for set, vs := range map[string][]Variant{"sft": sft, "train": train, "heldout": held} {
			for i, v := range vs {
				a, b, tpl := productFactors(t, v.Name)
				if v.Word != strconv.Itoa(a*b) || len(v.Word) != len(Word) {
					t.Fatalf("%s: answer %q, want the five digits of %d*%d", v.Name, v.Word, a, b)
				}
				if !strings.Contains(v.Instruction, fmt.Sprintf(productTemplates[tpl], a, b, OutFile)) || v.Category != "multiply" {
					t.Fatalf("%s: %q (category %q) does not ask for %d times %d in %s", v.Name, v.Instruction, v.Category, a, b, OutFile)
				}
				if other, dup := pairs[[2]int{a, b}]; dup {
					t.Fatalf("%s and %s both multiply %d by %d", other, v.Name, a, b)
				}
				pairs[[2]int{a, b}] = v.Name
				switch v.Expr {
				case ProductExpr(a, b):
				case "":
					if set != "sft" {
						t.Fatalf("%s variant %s writes the product out: only SFT demonstrations may", set, v.Name)
					}
					literal++
				default:
					t.Fatalf("%s: expression %q", v.Name, v.Expr)
				}
				if ProductHeldOutTemplates[tpl] != (set == "heldout") {
					t.Fatalf("%s variant %s uses template %d", set, v.Name, tpl)
				}
				if set != "sft" {
					continue
				}
				if (v.Expr == "") != (i%2 == 1) {
					t.Fatalf("SFT variant %d (%s): expression %q, want the shell's on even ones only", i, v.Name, v.Expr)
				}
				if i%2 == 1 && digits.ReplaceAllString(v.Instruction, "") != digits.ReplaceAllString(vs[i-1].Instruction, "") {
					t.Fatalf("SFT pair %d: %q and %q are worded differently: the wording would cue the form", i/2, vs[i-1].Instruction, v.Instruction)
				}
				if i%2 == 1 || i+1 < len(vs) {
					f := forms[tpl]
					f[min(len(v.Expr), 1)^1]++
					forms[tpl] = f
				}
			}
		}
		if literal != n/2 {
			t.Fatalf("%d of %d SFT demonstrations write the product out, want %d", literal, n, n/2)
		}
		for tpl, f := range forms {
			if f[0] != f[1] {
				t.Errorf("SFT wording %d: %d demonstrations compute with the shell, %d write it out: the wording cues the form", tpl, f[0], f[1])
			}
		}
		if len(forms) != len(productTemplates)-len(ProductHeldOutTemplates) {
			t.Errorf("SFT uses %d wordings, want every training wording", len(forms))
		}
	}
}

// TestProductSolutionsPassTheVerifier runs each written task's solution
// with bash and then its verifier: both solution forms earn every
// assertion; a product one off in its last digit earns two fewer, and the
// two factors written as text do not pass.
func TestProductSolutionsPassTheVerifier(t *testing.T) {
	sft, tr, ho, err := Product{SFT: 2, Train: 1, HeldOut: 1, Seed: 5}.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range append(append(sft, tr...), ho...) {
		if _, err := task.Load(d); err != nil {
			t.Fatal(err)
		}
		meta, err := os.ReadFile(filepath.Join(d, "task.toml"))
		if err != nil || !strings.Contains(string(meta), `category = "multiply"`) {
			t.Fatalf("%s/task.toml: %v\n%s", d, err, meta)
		}
		sol, err := os.ReadFile(filepath.Join(d, "solution/solve.sh"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(sol), "$((") != (i != 1) {
			t.Fatalf("%s: solution %q (the second SFT demonstration writes the product out, every other computes it)", d, sol)
		}
		script, err := os.ReadFile(filepath.Join(d, "tests/test.sh"))
		if err != nil {
			t.Fatal(err)
		}
		a, b, _ := productFactors(t, filepath.Base(d))
		for _, c := range []struct {
			name string
			run  func(root string) string // the agent's bash, given where /app/o is
			want int                      // assertions passed; -1: fewer than all
		}{
			{"reference solution", func(root string) string { return strings.ReplaceAll(string(sol), "/app/o", root+"/o") }, HelloAssertions},
			{"last digit off", func(root string) string {
				return fmt.Sprintf("echo %d%d >%s/o", a*b/10, (a*b+1)%10, root)
			}, HelloAssertions - 2},
			{"the expression as text", func(root string) string { return fmt.Sprintf("echo '%d*%d' >%s/o", a, b, root) }, -1},
		} {
			root := t.TempDir()
			if out, err := exec.Command("bash", "-c", c.run(root)).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			passed, total := runVerifier(t, string(script), root)
			if total != HelloAssertions || (c.want >= 0 && passed != c.want) || (c.want < 0 && passed == total) {
				t.Errorf("%s on %s: %d of %d assertions passed, want %d", c.name, d, passed, total, c.want)
			}
		}
	}
}

// TestProductStateFormNamesTheArithmetic: with StateForm every solution's
// analysis line names the form its command takes (the second SFT
// demonstration writes the product out); without it none has one.
func TestProductStateFormNamesTheArithmetic(t *testing.T) {
	for _, state := range []bool{false, true} {
		for i, b := range solutions(t)(Product{SFT: 4, Train: 1, HeldOut: 1, Seed: 5, StateForm: state}.Write(t.TempDir())) {
			written := i == 1 || i == 3 // the SFT pairs' second demonstrations
			want := ""
			if state {
				want = "# analysis: " + ShellAnalysis + "\n"
				if written {
					want = "# analysis: " + MentalAnalysis + "\n"
				}
			}
			got := strings.TrimPrefix(string(b), "#!/bin/bash\n")
			if !strings.HasPrefix(got, want) || (!state && strings.Contains(got, "analysis")) || strings.Contains(got, "$((") == written {
				t.Errorf("StateForm %v: solution %d %q, want it to start %q", state, i, b, want)
			}
		}
	}
}

// solutions reads the solve.sh of every task a family's Write wrote: SFT's,
// then training's, then held-out's.
func solutions(t *testing.T) func(sft, train, heldOut []string, err error) []string {
	return func(sft, train, heldOut []string, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range append(append(sft, train...), heldOut...) {
			b, err := os.ReadFile(filepath.Join(d, "solution/solve.sh"))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
		return out
	}
}
