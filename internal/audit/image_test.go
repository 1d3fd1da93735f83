package audit

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPathsReadAsAReaderReadsThem: a path followed by a full stop, in
// quotes or backticks is named; a longer file name is not.
func TestPathsReadAsAReaderReadsThem(t *testing.T) {
	for text, want := range map[string]bool{
		"Write the count to /app/out.txt.":       true,
		"Write the count to /app/out.txt...":     true,
		"Write it to `/app/out.txt`, then stop.": true,
		`Write it to "/app/out.txt".`:            true,
		"Write it to '/app/out.txt'":             true,
		"Write it to /app/out.txt.bak.":          false,
		"Write it to /app/out.txt2":              false,
	} {
		if got := containsPath(text, "/app/out.txt"); got != want {
			t.Errorf("%q names /app/out.txt: %v, want %v", text, got, want)
		}
	}
	if !namesDir("Put the reports in /app/reports.", "/app/reports") {
		t.Error("a directory before a full stop is not named")
	}
}

// TestOnlyWhatTheImageHoldsLeaks: context files the Dockerfile never copies
// do not reach the image; COPY of a file, a directory, a glob or the whole
// context does.
func TestOnlyWhatTheImageHoldsLeaks(t *testing.T) {
	env := map[string]string{
		"environment/Dockerfile": "", "environment/data.csv": "", "environment/tests/test_outputs.py": "",
		"environment/src/a.py": "", "environment/gen.py": "",
	}
	for df, want := range map[string]string{
		"FROM x\nCOPY data.csv /app/\n":                                 "environment/Dockerfile,environment/data.csv",
		"FROM x\nCOPY --chown=1:1 src/ gen.py /app/\n":                  "environment/Dockerfile,environment/gen.py,environment/src/a.py",
		"FROM x\nCOPY [\"*.csv\", \"/app/\"]\n":                         "environment/Dockerfile,environment/data.csv",
		"FROM x\nCOPY --from=build /tests /tests\nADD \\\n  tests /t\n": "environment/Dockerfile,environment/tests/test_outputs.py",
		"FROM x\nCOPY . /app\n":                                         "environment/Dockerfile,environment/data.csv,environment/gen.py,environment/src/a.py,environment/tests/test_outputs.py",
	} {
		if got := strings.Join(slices.Sorted(maps.Keys(imageFiles(env, df))), ","); got != want {
			t.Errorf("%q: image holds %s, want %s", df, got, want)
		}
	}
}

// TestCopiedTestsStillLeak: the unsound case stays rejected: a Dockerfile
// that copies the tests into the image.
func TestCopiedTestsStillLeak(t *testing.T) {
	s := analyze(t, filepath.Join("../../bench/audit-tasks", "leak-copied-tests"))
	if len(s.Leaks) == 0 || !strings.Contains(s.Leaks[0], "environment/test_outputs.py") {
		t.Fatalf("copied tests: leaks %v", s.Leaks)
	}
}
