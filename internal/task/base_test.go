package task

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsListEveryDefaultBase: docs/task-format.md's FROM table is
// DefaultBases, row for row: every pattern with its base, and "approximate"
// in the third column exactly where the import warns. A mapping added or
// changed in one place and not the other fails here.
func TestDocsListEveryDefaultBase(t *testing.T) {
	raw, err := os.ReadFile("../../docs/task-format.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		base   string
		approx bool
	}
	docs := map[string]row{}
	lines := strings.Split(string(raw), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "| FROM | base |") {
			start = i + 2 // past the header's separator
			break
		}
	}
	if start < 0 {
		t.Fatal("docs/task-format.md: no table headed | FROM | base |")
	}
	tick := regexp.MustCompile("`([^`]+)`")
	aside := regexp.MustCompile(`\([^)]*\)`)
	for _, l := range lines[start:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("docs/task-format.md: FROM table row %q has %d cells, want 3", l, len(cells))
		}
		r := row{base: strings.TrimSpace(cells[1]), approx: strings.HasPrefix(strings.TrimSpace(cells[2]), "approximate")}
		// "(`python:3.13-slim-bookworm` too)" is an example, not a pattern.
		for _, m := range tick.FindAllStringSubmatch(aside.ReplaceAllString(cells[0], ""), -1) {
			if _, dup := docs[m[1]]; dup {
				t.Errorf("docs/task-format.md: %s is listed twice", m[1])
			}
			docs[m[1]] = r
		}
	}
	for _, m := range DefaultBases {
		d, ok := docs[m.Pattern]
		if !ok {
			t.Errorf("DefaultBases maps %s to %s; docs/task-format.md's FROM table does not list it", m.Pattern, m.Base)
			continue
		}
		delete(docs, m.Pattern)
		if d.base != m.Base {
			t.Errorf("%s: docs say base %s, DefaultBases %s", m.Pattern, d.base, m.Base)
		}
		if d.approx != (m.Approx != "") {
			t.Errorf("%s: docs say approximate %v, DefaultBases' Approx is %q", m.Pattern, d.approx, m.Approx)
		}
		// What the import says for a FROM line this pattern reads.
		img := strings.ReplaceAll(m.Pattern, "*", "-slim")
		if got, ok := MatchBase(DefaultBases, img); !ok || got.Pattern != m.Pattern {
			continue // a longer pattern takes this example; its own row is checked
		}
		if w := baseWarnings("Dockerfile", "FROM "+img+"\n"); (len(w) > 0) != (m.Approx != "") {
			t.Errorf("FROM %s: import warnings %q, approximate %v", img, w, m.Approx != "")
		}
	}
	for p, d := range docs {
		t.Errorf("docs/task-format.md lists %s (base %s); DefaultBases has no such pattern", p, d.base)
	}
}
