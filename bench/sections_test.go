package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAssembleReplacesWhatRanKeepsTheRestAndMarksWhatFailed(t *testing.T) {
	old := "# Bench\n\n## A\nold a\n\n## Learning\ncurve\n\n## B\nold b\n\n## HF\nhf table\n"
	outs := []outcome{
		{section: section{name: "a", heading: "## A"}, text: "## A\nnew a\n"},
		{section: section{name: "b", heading: "## B"}, err: errors.New("sweep refused")},
		{section: section{name: "c", heading: "## C"}, text: "## C\nnew c\n"},
		{section: section{name: "d", heading: "## D"}, err: errors.New("no trainer")},
	}
	got := assemble(old, outs, "2026-12-01")
	want := "# Bench\n\n## A\nnew a\n\n## Learning\ncurve\n\n## B\n\n" +
		"> **Not refreshed:** the `make bench` run of 2026-12-01 failed this section (sweep refused); what follows is from an earlier run.\n" +
		"old b\n\n## HF\nhf table\n\n## C\nnew c\n\n## D\n\n" +
		"> **Not refreshed:** the `make bench` run of 2026-12-01 failed this section (no trainer); what follows is from an earlier run.\n"
	if got != want {
		t.Fatalf("assembled\n%s\nwant\n%s", got, want)
	}
	// A second failed run replaces the note instead of stacking another; a
	// good run then removes it.
	again := assemble(got, outs[1:2], "2026-12-02")
	if strings.Count(again, notRefreshed) != 2 || !strings.Contains(again, "run of 2026-12-02 failed this section (sweep refused); what follows is from an earlier run.\nold b\n") {
		t.Fatalf("second failure:\n%s", again)
	}
	fixed := assemble(again, []outcome{{section: section{heading: "## B"}, text: "## B\nnew b\n"}}, "2026-12-03")
	if !strings.Contains(fixed, "## B\nnew b\n\n## HF") || strings.Contains(fixed, "sweep refused") {
		t.Fatalf("a good run keeps no note:\n%s", fixed)
	}
	if fresh := assemble("", outs[:1], "x"); fresh != "# Benchmarks\n\n## A\nnew a\n" {
		t.Fatalf("from nothing: %q", fresh)
	}
	err := failures(outs)
	if err == nil || !strings.Contains(err.Error(), `section b ("## B") failed: sweep refused`) || !strings.Contains(err.Error(), `section d ("## D") failed: no trainer`) {
		t.Fatalf("failures: %v", err)
	}
	if failures(outs[:1]) != nil {
		t.Fatal("no failure, yet an error")
	}
}

func TestWriteAtomicLeavesOnlyTheFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "bench.md")
	for _, s := range []string{"one\n", "two\n"} {
		if err := writeAtomic(f, s); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(f); string(b) != s {
			t.Fatalf("read %q, want %q", b, s)
		}
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("left %d entries in the directory, want only bench.md", len(es))
	}
	if err := writeAtomic(filepath.Join(dir, "missing", "bench.md"), "x"); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}
