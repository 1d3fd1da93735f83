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

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
)

// harborSection is the heading of the Harbor-format task sets' figures.
const harborSection = "## Harbor-format tasks: images, oracle, audit"

// harborSets are the project's Harbor-format task sets, in the table's order.
var harborSets = []string{"examples/tasks", "examples/tb2", "examples/harbor-proof", "bench/audit-tasks"}

// harborTask is one task of a set, and whether it is sound (every task of
// the examples; in bench/audit-tasks, the ones labeled "").
type harborTask struct {
	set   string
	t     *task.Task
	ref   task.Ref
	sound bool
	image error
}

// benchHarbor measures, per task set: how many task images build, how many
// oracle solutions resolve (an eval sweep with the oracle, resolution as
// Harbor reads it), and how many sound tasks the audit keeps (an audit
// sweep over the sound ones). only, when not nil, names the tasks to
// measure (a smoke run's few).
func benchHarbor(ctx context.Context, b *bench, only []string) (string, error) {
	t0 := time.Now()
	ts, err := harborTasks(ctx, b, only)
	if err != nil {
		return "", err
	}
	var refs, sound []task.Ref
	for _, h := range ts {
		if h.image = harborImage(ctx, b, h.t); h.image == nil {
			refs = append(refs, h.ref)
			if h.sound {
				sound = append(sound, h.ref)
			}
		}
	}
	resolved := map[string]workflows.RolloutResult{}
	if len(refs) > 0 {
		sweep := fmt.Sprintf("bench-harbor-%d", time.Now().UnixNano())
		var res workflows.EvalSweepResult
		if err := execWait(ctx, b.c, ids.EvalSweepWorkflowID(sweep), workflows.EvalSweepWorkflow, workflows.EvalSweepInput{
			SweepID: sweep, Tasks: refs, Concurrency: 2, Agent: activities.AgentSpec{Kind: activities.AgentOracle},
		}, &res); err != nil {
			return "", fmt.Errorf("oracle sweep: %w", err)
		}
		var rep workflows.EvalReport
		if err := store.GetJSON(ctx, b.e.st, res.Report, &rep); err != nil {
			return "", err
		}
		for _, ro := range rep.Rollouts {
			resolved[ro.TaskID] = ro
		}
	}
	kept := map[string]bool{}
	why := map[string]string{}
	if len(sound) > 0 {
		run := fmt.Sprintf("bench-harbor-audit-%d", time.Now().UnixNano())
		var res workflows.AuditSweepResult
		if err := execWait(ctx, b.c, "auditsweep/"+run, workflows.AuditSweepWorkflow, workflows.AuditSweepInput{RunID: run, Tasks: sound, Concurrency: 2}, &res); err != nil {
			return "", fmt.Errorf("audit sweep: %w", err)
		}
		var rep workflows.AuditReport
		if err := store.GetJSON(ctx, b.e.st, res.Report, &rep); err != nil {
			return "", err
		}
		for _, v := range rep.Verdicts {
			kept[v.TaskID] = v.Kept
			why[v.TaskID] = strings.Join(append(append([]string{}, v.HardRejects...), v.Flags...), ",")
		}
	}
	return writeHarbor(ts, resolved, kept, why, time.Since(t0)), nil
}

// harborTasks loads and bundles the sets' tasks (only's, when not nil).
func harborTasks(ctx context.Context, b *bench, only []string) ([]*harborTask, error) {
	var out []*harborTask
	for _, set := range harborSets {
		dir := filepath.Join(testenv.RepoRoot(), set)
		labels := map[string]string{}
		if raw, err := os.ReadFile(filepath.Join(dir, "labels.json")); err == nil {
			var l struct {
				Tasks map[string]string `json:"tasks"`
			}
			if err := json.Unmarshal(raw, &l); err != nil {
				return nil, fmt.Errorf("%s/labels.json: %v", set, err)
			}
			labels = l.Tasks
		}
		ts, err := task.LoadAll(dir)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if only != nil && !contains(only, t.Name) {
				continue
			}
			ref, err := task.Bundle(ctx, b.e.st, t)
			if err != nil {
				return nil, err
			}
			out = append(out, &harborTask{set: set, t: t, ref: ref, sound: labels[t.Name] == ""})
		}
	}
	return out, nil
}

// harborImage builds the task's image as a sandbox would; the error is why not.
func harborImage(ctx context.Context, b *bench, t *task.Task) error {
	_, _, err := b.e.d.EnsureTaskImage(ctx, t, nil)
	return err
}

// writeHarbor is the section: one row per set, then every task that did not
// build, resolve or stay, and why.
func writeHarbor(ts []*harborTask, ros map[string]workflows.RolloutResult, kept map[string]bool, why map[string]string, wall time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n\n", harborSection)
	fmt.Fprintf(&b, "Every Harbor-format task set of the project, unchanged: each task's image built as a sandbox builds it (FROM lines through the base map), the oracle's\n")
	fmt.Fprintf(&b, "solution run and verified sealed in an eval sweep (resolved as Harbor reads the reward), and the sound tasks (all of the examples; bench/audit-tasks'\n")
	fmt.Fprintf(&b, "ones labeled sound) audited by AuditSweepWorkflow. `go run ./bench -only harbor` runs this part alone.\n\n")
	fmt.Fprintf(&b, "| task set | images built | oracle resolved | sound tasks the audit keeps |\n|---|---|---|---|\n")
	var notes []string
	tot := [5]int{}
	for _, set := range harborSets {
		c := [5]int{} // built, tasks, resolved, kept, sound
		for _, h := range ts {
			if h.set != set {
				continue
			}
			c[1]++
			if h.image != nil {
				notes = append(notes, fmt.Sprintf("| %s | image | %s |", h.t.Name, oneLine(h.image.Error())))
				continue
			}
			c[0]++
			ro := ros[h.t.ID]
			if ro.Resolved {
				c[2]++
			} else {
				notes = append(notes, fmt.Sprintf("| %s | oracle | %s %d/%d %s |", h.t.Name, orDash(ro.Outcome), ro.Passed, ro.Total, oneLine(ro.Error)))
			}
			if h.sound {
				c[4]++
				if kept[h.t.ID] {
					c[3]++
				} else {
					notes = append(notes, fmt.Sprintf("| %s | audit | rejected: %s |", h.t.Name, orDash(why[h.t.ID])))
				}
			}
		}
		if c[1] == 0 {
			continue
		}
		for i := range c {
			tot[i] += c[i]
		}
		fmt.Fprintf(&b, "| `%s` | %d / %d | %d / %d | %d / %d |\n", set, c[0], c[1], c[2], c[1], c[3], c[4])
	}
	fmt.Fprintf(&b, "| all | %d / %d | %d / %d | %d / %d |\n", tot[0], tot[1], tot[2], tot[1], tot[3], tot[4])
	fmt.Fprintf(&b, "\n%d tasks in %s.\n", tot[1], wall.Round(time.Second))
	if len(notes) > 0 {
		sort.Strings(notes)
		fmt.Fprintf(&b, "\nWhat did not build, resolve or stay:\n\n| task | step | why |\n|---|---|---|\n%s\n", strings.Join(notes, "\n"))
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

// runHarborOnly runs the Harbor-format section alone and replaces its
// section of out (or appends it).
func runHarborOnly(out string) error {
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
	sec, err := benchHarbor(ctx, &bench{e: e, c: c}, nil)
	if err != nil {
		return err
	}
	fmt.Print(sec)
	return spliceSection(out, harborSection, sec)
}
