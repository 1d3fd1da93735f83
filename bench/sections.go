package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/gpu"
)

// sizes is how much each section of a run measures: a full `make bench`
// uses fullSizes, the smoke test (smoke_test.go) tiny ones.
type sizes struct {
	lifecycleN   int // lifecycle repetitions
	turns        int // turns per rollout of the turn-loop benchmark
	loopReps     int // rollouts of the turn-loop benchmark
	harnessTurns int // model-driven turns of the harness rollout
	rstSeeds     int // examples/seeds seeds the synthesis uses; 0: all
	rstRounds    int
	auditTasks   []string // bench/audit-tasks tasks to audit; nil: all
	steps        int      // the campaign's PPO steps
	rollouts     int      // the campaign's rollouts per step
	memConc      []int    // concurrent rollouts of the memory table
	verifyN      int      // oracle sandboxes per task and path
	verifyTasks  string   // comma-separated tasks to verify; "": all
	harborTasks  []string // Harbor-format tasks the harbor section measures; nil: all
	refArgs      []string // gpu/reference/bench.py's flags
}

func fullSizes(n, turns, verifyN int, verifyTasks string) sizes {
	return sizes{lifecycleN: n, turns: turns, loopReps: 3, harnessTurns: 12, rstRounds: 2,
		steps: 4, rollouts: 4, memConc: []int{1, 4, 8}, verifyN: verifyN, verifyTasks: verifyTasks}
}

// bench is what a section runs against: the shared environment, a dev
// server with a worker of every role, and the sizes.
type bench struct {
	e  *env
	c  client.Client
	sz sizes
}

// section is one "## " section of docs/bench.md that a full run measures.
type section struct {
	name, heading string
	run           func(context.Context, *bench) (string, error)
}

// sections are what a full `make bench` measures, in the order it runs them.
// The doc's other sections (the Hugging Face backend, scale, the learning
// curve) are written by other targets or by hand and kept as they are.
var sections = []section{
	{"sandbox", sandboxSection, benchSandbox},
	{"rst", "## Task synthesis and audit", func(ctx context.Context, b *bench) (string, error) {
		return benchRST(ctx, b.c, b.e.st, b.sz.rstSeeds, b.sz.rstRounds)
	}},
	{"audit", auditSection, func(ctx context.Context, b *bench) (string, error) {
		return benchAudit(ctx, b.c, b.e.st, b.sz.auditTasks)
	}},
	{"campaign", campaignSection, func(ctx context.Context, b *bench) (string, error) {
		return benchCampaign(ctx, b.c, b.e.st, filepath.Join(b.e.tmp, "campaign"), b.e.ref, b.sz)
	}},
	{"reference", "## Reference trainer and inference (CPU)", benchReference},
	{"verify", verifySection, func(ctx context.Context, b *bench) (string, error) {
		return benchVerify(ctx, b.e, b.sz.verifyN, b.sz.verifyTasks)
	}},
	{"harbor", harborSection, func(ctx context.Context, b *bench) (string, error) {
		return benchHarbor(ctx, b, b.sz.harborTasks)
	}},
}

// outcome is one section's run: its text (from its heading on) or why it failed.
type outcome struct {
	section
	text string
	err  error
	took time.Duration
}

// runSections runs each section in turn, whether or not the ones before it
// failed, and checks that each one's text starts with its own heading.
func runSections(ctx context.Context, b *bench, secs []section) []outcome {
	var outs []outcome
	for _, s := range secs {
		fmt.Fprintf(os.Stderr, "bench: section %s ...\n", s.name)
		t0 := time.Now()
		text, err := s.run(ctx, b)
		text = strings.TrimLeft(text, "\n")
		if err == nil && !strings.HasPrefix(text, s.heading+"\n") {
			err = fmt.Errorf("its text does not start with its heading %q", s.heading)
		}
		o := outcome{section: s, text: strings.TrimRight(text, "\n") + "\n", err: err, took: time.Since(t0)}
		fmt.Fprintf(os.Stderr, "bench: section %s: %s (%s)\n", s.name, errOr(err, "done"), o.took.Round(time.Second))
		outs = append(outs, o)
	}
	return outs
}

func errOr(err error, ok string) string {
	if err != nil {
		return "FAILED: " + err.Error()
	}
	return ok
}

// notRefreshed starts the note a failed section gets in place of new figures.
const notRefreshed = "> **Not refreshed:**"

// assemble splices the outcomes into old (the doc as it was): a section that
// ran replaces its namesake (or is appended); one that failed keeps its old
// text under a note saying the run of day failed it and why, so stale
// figures never read as fresh. Every other section of old stays as it was.
func assemble(old string, outs []outcome, day string) string {
	doc := old
	if strings.TrimSpace(doc) == "" {
		doc = "# Benchmarks\n"
	}
	for _, o := range outs {
		if o.err == nil {
			doc = replaceSection(doc, o.heading, o.text)
			continue
		}
		body := sectionOf(doc, o.heading)
		if body == "" {
			body = o.heading + "\n"
		}
		lines := strings.SplitN(body, "\n", 2)
		rest := lines[1]
		if strings.HasPrefix(strings.TrimLeft(rest, "\n"), notRefreshed) { // the note of an earlier failed run
			rest = strings.SplitN(strings.TrimLeft(rest, "\n"), "\n", 2)[1]
		}
		note := fmt.Sprintf("%s the `make bench` run of %s failed this section (%s); what follows is from an earlier run.\n",
			notRefreshed, day, strings.ReplaceAll(o.err.Error(), "\n", " "))
		doc = replaceSection(doc, o.heading, lines[0]+"\n\n"+note+rest)
	}
	return doc
}

// failures names the failed sections, nil when none failed.
func failures(outs []outcome) error {
	var errs []error
	for _, o := range outs {
		if o.err != nil {
			errs = append(errs, fmt.Errorf("section %s (%q) failed: %w", o.name, o.heading, o.err))
		}
	}
	return errors.Join(errs...)
}

// sectionOf is the section of doc that starts with heading, up to the next
// "## " heading, or "" when doc has none.
func sectionOf(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+1:]
	if j := strings.Index(rest[len(heading):], "\n## "); j >= 0 {
		return rest[:len(heading)+j+1]
	}
	return rest
}

// replaceSection swaps the section that starts with heading (up to the next
// "## " heading) for sec (which starts with the heading), or appends sec;
// one blank line separates sections.
func replaceSection(doc, heading, sec string) string {
	sec = strings.TrimRight(strings.TrimLeft(sec, "\n"), "\n") + "\n"
	old := sectionOf(doc, heading)
	if old == "" {
		return strings.TrimRight(doc, "\n") + "\n\n" + sec
	}
	i := strings.Index(doc, "\n"+heading+"\n") + 1
	tail := doc[i+len(old):]
	if tail != "" {
		sec += "\n"
	}
	return strings.TrimRight(doc[:i], "\n") + "\n\n" + sec + tail
}

// spliceSection replaces (or appends) one "## " section of a markdown file,
// atomically.
func spliceSection(file, heading, section string) error {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return writeAtomic(file, replaceSection(string(old), heading, section))
}

// writeAtomic writes file through a temporary file in its directory and a
// rename: a reader sees the old content or the new, never a part.
func writeAtomic(file, content string) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// benchReference runs the reference trainer's and inference server's own
// benchmark (gpu/reference/bench.py), which prints its section.
func benchReference(ctx context.Context, b *bench) (string, error) {
	cmd := exec.CommandContext(ctx, gpu.Python(), append([]string{filepath.Join(gpu.ReferenceDir(), "bench.py")}, b.sz.refArgs...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s := stderr.String()
		return "", fmt.Errorf("gpu/reference/bench.py: %v: %s", err, s[max(0, len(s)-2000):])
	}
	return string(out), nil
}
