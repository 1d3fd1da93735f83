package main

import "testing"

func TestSectionsNotInKeepsWhatAFullRunDoesNotMeasure(t *testing.T) {
	old := "# Bench\n\n## A\nold a\n\n## Learning\ncurve\n\n## B\nold b\n\n## HF\nhf table\n"
	fresh := "# Bench\n\n## A\nnew a\n\n## B\nnew b\n"
	got := sectionsNotIn(old, fresh)
	want := "\n## Learning\ncurve\n\n## HF\nhf table\n"
	if got != want {
		t.Fatalf("kept %q, want %q", got, want)
	}
	if k := sectionsNotIn(fresh, fresh); k != "" {
		t.Fatalf("a run keeps nothing of its own output, got %q", k)
	}
}
