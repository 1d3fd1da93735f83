package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

// auditSection is the heading of the audit benchmark's part of docs/bench.md.
const auditSection = "## Audit precision and recall"

// auditTasksDir holds the labeled audit benchmark: sound tasks and tasks with
// one planted defect each, labeled in labels.json ("" for sound).
var auditTasksDir = filepath.Join("bench", "audit-tasks")

// benchAudit audits the labeled tasks and scores the audit against the
// labels: precision and recall per hard reject, sound tasks kept, throughput.
// only, when not nil, names the tasks to audit (a smoke run's few).
func benchAudit(ctx context.Context, c client.Client, st store.Store, only []string) (string, error) {
	dir := filepath.Join(testenv.RepoRoot(), auditTasksDir)
	var labels struct {
		Tasks map[string]string `json:"tasks"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "labels.json"))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &labels); err != nil {
		return "", fmt.Errorf("%s/labels.json: %v", auditTasksDir, err)
	}
	ts, err := task.LoadAll(dir)
	if err != nil {
		return "", err
	}
	var refs []task.Ref
	for _, t := range ts {
		if only != nil && !contains(only, t.Name) {
			continue
		}
		if _, ok := labels.Tasks[t.Name]; !ok {
			return "", fmt.Errorf("%s: task %s has no label in labels.json", auditTasksDir, t.Name)
		}
		r, err := task.Bundle(ctx, st, t)
		if err != nil {
			return "", err
		}
		refs = append(refs, r)
	}
	run := fmt.Sprintf("bench-audit-%d", time.Now().UnixNano())
	t0 := time.Now()
	var res workflows.AuditSweepResult
	if err := execWait(ctx, c, "auditsweep/"+run, workflows.AuditSweepWorkflow, workflows.AuditSweepInput{
		RunID: run, Tasks: refs, Concurrency: 3,
	}, &res); err != nil {
		return "", err
	}
	wall := time.Since(t0)
	var rep workflows.AuditReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return "", err
	}
	return scoreAudit(rep.Verdicts, labels.Tasks, wall), nil
}

// scoreAudit writes the section: per hard reject, precision (of the tasks
// rejected for it, how many carry that defect) and recall (of the tasks
// with that defect, how many were rejected for it).
func scoreAudit(vs []audit.Verdict, labels map[string]string, wall time.Duration) string {
	reasons := []string{audit.HiddenRequirements, audit.TestLeakage, audit.ShortcutSolution, audit.WeakVerifier}
	var b strings.Builder
	sound, soundKept := 0, 0
	var misses []string
	fmt.Fprintf(&b, "\n%s\n\n", auditSection)
	fmt.Fprintf(&b, "The labeled benchmark in `%s` (%d tasks: sound ones and ones with one planted defect each,\n", auditTasksDir, len(vs))
	fmt.Fprintf(&b, "labels in `labels.json`), audited by AuditSweepWorkflow, 3 audits at once. `go run ./bench -audit-only` runs this part alone.\n\n")
	fmt.Fprintf(&b, "| hard reject | planted | rejected | correct | precision | recall |\n|---|---|---|---|---|---|\n")
	for _, r := range reasons {
		planted, rejected, correct := 0, 0, 0
		for _, v := range vs {
			has := contains(v.HardRejects, r)
			if labels[v.Name] == r {
				planted++
			}
			if has {
				rejected++
			}
			if has && labels[v.Name] == r {
				correct++
			}
		}
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %s | %s |\n", r, planted, rejected, correct, share(correct, rejected), share(correct, planted))
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
	for _, v := range vs {
		want := labels[v.Name]
		if want == "" {
			sound++
			if v.Kept {
				soundKept++
			}
		}
		got := strings.Join(v.HardRejects, ",")
		if got != want || (want == "" && !v.Kept) {
			misses = append(misses, fmt.Sprintf("| %s | %s | %s | %v | %.3f | %s |", v.Name, orDash(want), orDash(got), v.Kept, v.Score, orDash(strings.Join(v.Flags, ","))))
		}
	}
	fmt.Fprintf(&b, "\nSound tasks kept: %d of %d. Throughput: %d tasks in %s, **%.0f tasks/hour**.\n", soundKept, sound, len(vs), wall.Round(time.Second), float64(len(vs))/wall.Hours())
	if len(misses) > 0 {
		fmt.Fprintf(&b, "\nTasks the audit got wrong:\n\n| task | label | hard rejects | kept | score | flags |\n|---|---|---|---|---|---|\n%s\n", strings.Join(misses, "\n"))
	}
	return b.String()
}

// share is a/b as a precision or recall, "–" when b is 0.
func share(a, b int) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// runAuditOnly runs the audit benchmark alone and replaces its section of
// the existing docs/bench.md (or appends it).
func runAuditOnly(out string) error {
	ctx := context.Background()
	e, cleanup, err := setup(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	c, stop, err := e.serve(ctx)
	if err != nil {
		return err
	}
	defer stop()
	sec, err := benchAudit(ctx, c, e.st, nil)
	if err != nil {
		return err
	}
	fmt.Print(sec)
	return spliceSection(out, auditSection, sec)
}
