// Package synth grows tasks by recursive task synthesis (RST): each round
// appends one or more executable steps to a task's reference solution and
// realigns its environment (the step's inputs), verifier (per-assertion tests
// for the new step) and public instruction. Step generators draw every
// parameter from a seeded RNG, so the same seed and RNG seed give the same
// tasks.
package synth

import (
	"fmt"
	"math/rand"
	"strings"

	"github.com/t1flow/t1flow/internal/text"
)

// Step is what one generator contributes to a round.
type Step struct {
	Kind        string
	Category    string
	Setup       string // bash run at image build time (a Dockerfile RUN line); may be empty
	Solution    string // bash appended to solution/solve.sh
	Tests       string // pytest functions for tests/test_round_<n>.py (stdlib only)
	Instruction string // the requirement appended to instruction.md
}

// Generator makes one step; Make's tag is the step's private suffix for
// paths and names (unique per round), so steps compose with any task.
type Generator struct {
	Name     string
	Category string
	Make     func(r *rand.Rand, tag string) Step
}

var words = []string{"alpha", "bravo", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "juniper",
	"kelvin", "lumen", "marble", "nectar", "onyx", "pollen", "quartz", "raven", "saffron", "tundra", "umber", "violet"}

func pick(r *rand.Rand, xs []string) string { return xs[r.Intn(len(xs))] }

func picks(r *rand.Rand, xs []string, n int) []string {
	p := r.Perm(len(xs))
	out := make([]string, n)
	for i := range out {
		out[i] = xs[p[i]]
	}
	return out
}

// q quotes for bash single quotes.
var q = text.ShellQuote

// Generators is the library, across the task categories of the T1 pool.
var Generators = []Generator{
	{"copy_by_extension", "file-operations", func(r *rand.Rand, tag string) Step {
		src, dst := "/app/src_"+tag, "/app/out_"+tag
		ext := pick(r, []string{"txt", "cfg", "md", "csv"})
		var files []string
		for i, w := range picks(r, words, 6) {
			e := ext
			if i%2 == 1 {
				e = pick(r, []string{"log", "bak", "tmp"})
			}
			files = append(files, fmt.Sprintf("%s_%d.%s", w, r.Intn(90)+10, e))
		}
		var setup []string
		setup = append(setup, "mkdir -p "+src)
		for _, f := range files {
			setup = append(setup, fmt.Sprintf("echo %s > %s/%s", q("content of "+f), src, f))
		}
		return Step{
			Setup:       strings.Join(setup, " && "),
			Solution:    fmt.Sprintf("mkdir -p %[2]s/%[3]s_files\ncp %[1]s/*.%[3]s %[2]s/%[3]s_files/\n", src, dst, ext),
			Instruction: fmt.Sprintf("Copy every `.%[3]s` file from `%[1]s` into the directory `%[2]s/%[3]s_files` (create it), keeping file names and contents; copy nothing else.", src, dst, ext),
			Tests: fmt.Sprintf(`import os

SRC, DST, EXT = %q, %q, %q


def test_%[4]s_copied():
    want = sorted(f for f in os.listdir(SRC) if f.endswith("." + EXT))
    assert want and sorted(os.listdir(DST)) == want


def test_%[4]s_contents_kept():
    for f in os.listdir(DST):
        assert open(os.path.join(DST, f)).read() == open(os.path.join(SRC, f)).read()
`, src, dst+"/"+ext+"_files", ext, tag),
		}
	}},
	{"count_word", "text-processing", func(r *rand.Rand, tag string) Step {
		data, out := "/app/data_"+tag+"/events.log", "/app/out_"+tag
		word := pick(r, words)
		var lines []string
		for i := 0; i < 12+r.Intn(10); i++ {
			ws := picks(r, words, 3)
			lines = append(lines, fmt.Sprintf("2024-0%d-1%d %s", r.Intn(9)+1, r.Intn(9), strings.Join(ws, " ")))
		}
		return Step{
			Setup:       fmt.Sprintf("mkdir -p /app/data_%s && printf '%%s\\n' %s > %s", tag, strings.Join(quoteAll(lines), " "), data),
			Solution:    fmt.Sprintf("mkdir -p %s\ngrep -c -w %s %s > %s/%s_count.txt || true\n", out, q(word), data, out, word),
			Instruction: fmt.Sprintf("Write the number of lines of `%s` that contain the word `%s` (as a whole word) to `%s/%s_count.txt`.", data, word, out, word),
			Tests: fmt.Sprintf(`import re

DATA, OUT, WORD = %q, %q, %q


def test_%[4]s_count_file():
    with open(OUT) as f:
        got = int(f.read().strip())
    with open(DATA) as f:
        want = sum(1 for line in f if re.search(r"\b%%s\b" %% re.escape(WORD), line))
    assert got == want
`, data, out+"/"+word+"_count.txt", word, tag),
		}
	}},
	{"sum_script", "scripting", func(r *rand.Rand, tag string) Step {
		name := pick(r, words) + "_sum"
		path := "/app/bin_" + tag + "/" + name + ".sh"
		return Step{
			Solution:    fmt.Sprintf("mkdir -p /app/bin_%s\ncat > %s <<'SCRIPT'\n#!/bin/bash\ns=0\nfor x in \"$@\"; do s=$((s + x)); done\necho \"$s\"\nSCRIPT\nchmod +x %s\n", tag, path, path),
			Instruction: fmt.Sprintf("Create an executable script `%s` that prints the sum of its integer arguments (which may be negative), or `0` when it gets none.", path),
			Tests: fmt.Sprintf(`import os
import random
import subprocess

SCRIPT = %q


def run(*args):
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=20).stdout.strip()


def test_%[2]s_executable():
    assert os.access(SCRIPT, os.X_OK)


def test_%[2]s_sums():
    xs = [random.randint(-50, 500) for _ in range(random.randint(2, 7))]
    assert run(*xs) == str(sum(xs))


def test_%[2]s_no_arguments():
    assert run() == "0"
`, path, tag),
		}
	}},
	{"git_commit_file", "version-control", func(r *rand.Rand, tag string) Step {
		repo := "/app/repo_" + tag
		line := fmt.Sprintf("%s %s %d", pick(r, words), pick(r, words), r.Intn(1000))
		msg := fmt.Sprintf("add notes for %s", pick(r, words))
		return Step{
			Solution:    fmt.Sprintf("git init -q %[1]s\necho %[2]s > %[1]s/NOTES.md\ngit -C %[1]s add NOTES.md\ngit -C %[1]s -c user.name=agent -c user.email=agent@example.com commit -qm %[3]s\n", repo, q(line), q(msg)),
			Instruction: fmt.Sprintf("Create a git repository in `%s` with one commit whose message is `%s` and which adds a file `NOTES.md` containing exactly the line `%s`.", repo, msg, line),
			Tests: fmt.Sprintf(`import subprocess

REPO, LINE, MSG = %q, %q, %q


def git(*a):
    return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, check=True).stdout


def test_%[4]s_one_commit():
    assert git("log", "--format=%%s").split("\n")[0] == MSG
    assert git("rev-list", "--count", "HEAD").strip() == "1"


def test_%[4]s_notes_committed():
    assert git("show", "HEAD:NOTES.md") == LINE + "\n"
`, repo, line, msg, tag),
		}
	}},
	{"create_user", "system-administration", func(r *rand.Rand, tag string) Step {
		user := fmt.Sprintf("%s%s", pick(r, words)[:4], tag)
		group := "grp" + tag
		return Step{
			Solution:    fmt.Sprintf("groupadd %[2]s\nuseradd -m -d /home/%[1]s -s /bin/sh -g %[2]s %[1]s\n", user, group),
			Instruction: fmt.Sprintf("Create a group `%[2]s` and a user `%[1]s` whose primary group it is, with home directory `/home/%[1]s` (created) and login shell `/bin/sh`.", user, group),
			Tests: fmt.Sprintf(`import grp
import os
import pwd

USER, GROUP = %q, %q


def test_%[3]s_user():
    u = pwd.getpwnam(USER)
    assert grp.getgrgid(u.pw_gid).gr_name == GROUP
    assert u.pw_shell == "/bin/sh"


def test_%[3]s_home():
    u = pwd.getpwnam(USER)
    assert u.pw_dir == "/home/" + USER and os.path.isdir(u.pw_dir)
    assert os.stat(u.pw_dir).st_uid == u.pw_uid
`, user, group, tag),
		}
	}},
	{"csv_column_total", "data-processing", func(r *rand.Rand, tag string) Step {
		data, out := "/app/data_"+tag+"/ledger.csv", "/app/out_"+tag+"/total.txt"
		rows := []string{"id,name,amount"}
		for i := 1; i <= 8+r.Intn(8); i++ {
			rows = append(rows, fmt.Sprintf("%d,%s,%d.%02d", i, pick(r, words), r.Intn(900)+10, r.Intn(100)))
		}
		return Step{
			Setup:       fmt.Sprintf("mkdir -p /app/data_%s && printf '%%s\\n' %s > %s", tag, strings.Join(quoteAll(rows), " "), data),
			Solution:    fmt.Sprintf("mkdir -p /app/out_%s\nawk -F, 'NR > 1 { s += $3 } END { printf \"%%.2f\\n\", s }' %s > %s\n", tag, data, out),
			Instruction: fmt.Sprintf("Write the sum of the `amount` column of `%s` to `%s`, formatted with exactly two decimals.", data, out),
			Tests: fmt.Sprintf(`import csv

DATA, OUT = %q, %q


def test_%[3]s_total():
    with open(DATA) as f:
        want = sum(float(r["amount"]) for r in csv.DictReader(f))
    got = open(OUT).read().strip()
    assert got == "%%.2f" %% want
`, data, out, tag),
		}
	}},
	{"fix_mean_bug", "debugging", func(r *rand.Rand, tag string) Step {
		path := "/app/tools_" + tag + "/mean.py"
		prog := "import sys\\nxs = [float(a) for a in sys.argv[1:]]\\nprint(round(sum(xs) / (len(xs) - 1), 3))\\n"
		return Step{
			Setup:       fmt.Sprintf("mkdir -p /app/tools_%s && printf '%s' > %s", tag, prog, path),
			Solution:    fmt.Sprintf("sed -i 's|(len(xs) - 1)|len(xs)|' %s\n", path),
			Instruction: fmt.Sprintf("`%s` should print the mean of the numbers given as arguments, rounded to 3 decimals, but it prints wrong values. Fix the bug without changing its interface.", path),
			Tests: fmt.Sprintf(`import random
import subprocess

PROG = %q


def mean(*xs):
    out = subprocess.run(["python3", PROG, *map(str, xs)], capture_output=True, text=True, timeout=20)
    return float(out.stdout.strip())


def test_%[2]s_mean():
    xs = [random.randint(1, 100) for _ in range(random.randint(2, 6))]
    assert mean(*xs) == round(sum(xs) / len(xs), 3)


def test_%[2]s_single_value():
    assert mean(7) == 7.0
`, path, tag),
		}
	}},
	{"archive_directory", "file-operations", func(r *rand.Rand, tag string) Step {
		docs, out := "/app/docs_"+tag, "/app/out_"+tag+"/docs.tar.gz"
		var setup []string
		setup = append(setup, "mkdir -p "+docs+"/sub")
		for _, w := range picks(r, words, 4) {
			setup = append(setup, fmt.Sprintf("echo %s > %s/%s.txt", q(w+" notes"), docs, w))
		}
		setup = append(setup, fmt.Sprintf("echo nested > %s/sub/%s.txt", docs, pick(r, words)))
		return Step{
			Setup:       strings.Join(setup, " && "),
			Solution:    fmt.Sprintf("mkdir -p /app/out_%s\ntar -czf %s -C %s .\n", tag, out, docs),
			Instruction: fmt.Sprintf("Create a gzip-compressed tar archive `%s` of the contents of `%s` (paths inside the archive relative to that directory).", out, docs),
			Tests: fmt.Sprintf(`import os
import tarfile

DOCS, OUT = %q, %q


def test_%[3]s_archive_members():
    with tarfile.open(OUT, "r:gz") as t:
        names = {os.path.normpath(m.name) for m in t.getmembers() if m.isfile()}
    want = {os.path.relpath(os.path.join(d, f), DOCS) for d, _, fs in os.walk(DOCS) for f in fs}
    assert names == want
`, docs, out, tag),
		}
	}},
	{"sort_unique", "text-processing", func(r *rand.Rand, tag string) Step {
		data, out := "/app/data_"+tag+"/words.txt", "/app/out_"+tag+"/unique.txt"
		var ws []string
		for i := 0; i < 15; i++ {
			ws = append(ws, pick(r, words))
		}
		return Step{
			Setup:       fmt.Sprintf("mkdir -p /app/data_%s && printf '%%s\\n' %s > %s", tag, strings.Join(ws, " "), data),
			Solution:    fmt.Sprintf("mkdir -p /app/out_%s\nsort -u %s > %s\n", tag, data, out),
			Instruction: fmt.Sprintf("Write the distinct lines of `%s`, sorted, one per line, to `%s`.", data, out),
			Tests: fmt.Sprintf(`DATA, OUT = %q, %q


def test_%[3]s_unique_sorted():
    want = sorted(set(open(DATA).read().split()))
    assert open(OUT).read().split() == want
`, data, out, tag),
		}
	}},
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = q(x)
	}
	return out
}
