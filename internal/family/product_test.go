package family

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
)

// TestProductVariants: every variant's answer is the product of the two
// numbers its instruction names, five digits; half the SFT demonstrations
// compute it with the shell and half write it out, each wording as often
// one way as the other; training and held-out
// solutions compute it; held-out variants use wordings no other set does.
func TestProductVariants(t *testing.T) {
	sft, train, held := Product{SFT: 40, Train: 60, HeldOut: 20, Seed: 5}.Variants()
	if len(sft) != 40 || len(train) != 60 || len(held) != 20 {
		t.Fatalf("%d %d %d variants", len(sft), len(train), len(held))
	}
	template := func(v Variant) int {
		i := strings.LastIndex(v.Name, "-t")
		n, err := strconv.Atoi(v.Name[i+2:])
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		return n
	}
	literal := 0
	forms := map[int][2]int{} // SFT wording: [shell, written out]
	for set, vs := range map[string][]Variant{"sft": sft, "train": train, "heldout": held} {
		for _, v := range vs {
			var a, b int
			if _, err := fmt.Sscanf(v.Name, "%dx%d-", &a, &b); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			if v.Word != strconv.Itoa(a*b) || len(v.Word) != len(Word) {
				t.Fatalf("%s: answer %q, want the five digits of %d*%d", v.Name, v.Word, a, b)
			}
			if !strings.Contains(v.Instruction, strconv.Itoa(a)) || !strings.Contains(v.Instruction, strconv.Itoa(b)) || !strings.Contains(v.Instruction, OutFile) {
				t.Fatalf("%s: %q does not name %d, %d and %s", v.Name, v.Instruction, a, b, OutFile)
			}
			if set == "sft" {
				f := forms[template(v)]
				f[min(len(v.Expr), 1)^1]++
				forms[template(v)] = f
			}
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
			if ProductHeldOutTemplates[template(v)] != (set == "heldout") {
				t.Fatalf("%s variant %s uses template %d", set, v.Name, template(v))
			}
		}
	}
	if literal != len(sft)/2 {
		t.Fatalf("%d SFT demonstrations write the product out, want half of %d", literal, len(sft))
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

// TestProductSolutionsPassTheVerifier runs each written task's solution
// with bash and then its verifier: both solution forms earn every
// assertion; a product one off in its last digit, or the two factors
// written as text, earn less.
func TestProductSolutionsPassTheVerifier(t *testing.T) {
	sft, tr, ho, err := Product{SFT: 2, Train: 1, HeldOut: 1, Seed: 5}.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range append(append(sft, tr...), ho...) {
		if _, err := task.Load(d); err != nil {
			t.Fatal(err)
		}
		sol, _ := os.ReadFile(filepath.Join(d, "solution/solve.sh"))
		if strings.Contains(string(sol), "$((") != (i != 1) {
			t.Fatalf("%s: solution %q (the second SFT demonstration writes the product out, every other computes it)", d, sol)
		}
		script, _ := os.ReadFile(filepath.Join(d, "tests/test.sh"))
		var a, b int
		if _, err := fmt.Sscanf(filepath.Base(d), "%dx%d-", &a, &b); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			run  func(root string) string // the agent's bash, given where /app/o is
			want int
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
			v := strings.NewReplacer("/app/o", root+"/o", "/logs/verifier", root+"/logs").Replace(string(script))
			passed, total := runVerifier(t, v, root)
			if total != HelloAssertions || (c.want >= 0 && passed != c.want) || (c.want < 0 && passed >= HelloAssertions-1) {
				t.Errorf("%s on %s: %d of %d assertions passed, want %d", c.name, d, passed, total, c.want)
			}
		}
	}
}

// TestProductStateFormNamesTheArithmetic: with StateForm every solution's
// analysis line names the form its command takes; without it none has one.
func TestProductStateFormNamesTheArithmetic(t *testing.T) {
	for _, state := range []bool{false, true} {
		sft, tr, ho, err := Product{SFT: 4, Train: 1, HeldOut: 1, Seed: 5, StateForm: state}.Write(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append(append(sft, tr...), ho...) {
			b, err := os.ReadFile(filepath.Join(d, "solution/solve.sh"))
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if state {
				want = "# analysis: " + MentalAnalysis + "\n"
				if strings.Contains(string(b), "$((") {
					want = "# analysis: " + ShellAnalysis + "\n"
				}
			}
			if got := strings.TrimPrefix(string(b), "#!/bin/bash\n"); !strings.HasPrefix(got, want) || (!state && strings.Contains(got, "analysis")) {
				t.Errorf("StateForm %v: %s solution %q, want it to start %q", state, d, b, want)
			}
		}
	}
}
