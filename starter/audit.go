package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/BurntSushi/toml"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// auditFlags are the flags of `starter audit`.
type auditFlags struct {
	tasks, eval taskSource
	keep        string
	cfg         audit.Config
	runFlags
}

func parseAudit(args []string) (*auditFlags, error) {
	f := &auditFlags{}
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	f.tasks.register(fs, "", "pool to audit", "a task directory or a directory of them, in place of --pool")
	fs.StringVar(&f.keep, "keep-pool", "", "pool that receives the kept tasks")
	f.eval.register(fs, "eval-", "an eval pool to check contamination against", "eval task sets (directories) to check contamination against")
	cfgFile := fs.String("config", "", "TOML file of thresholds (keep_score, duplicate_jaccard, contamination_share, mutants, ...)")
	f.register(fs, 2, "tasks audited at once (each runs 3 + mutants rollouts)")
	if _, err := parse(fs, args); err != nil {
		return nil, err
	}
	if (f.tasks.pool == "") == (f.tasks.dir == "") {
		return nil, badInput(errors.New("usage: starter audit (--pool NAME | --tasks DIR) --keep-pool NAME"))
	}
	if f.keep != "" {
		if err := task.ValidatePoolName(f.keep); err != nil {
			return nil, badInput(err)
		}
	}
	var err error
	if f.cfg, err = auditConfig(*cfgFile); err != nil {
		return nil, err
	}
	return f, nil
}

// auditConfig is the default thresholds, overridden by the TOML file if one is named.
func auditConfig(file string) (audit.Config, error) {
	cfg := audit.DefaultConfig()
	if file == "" {
		return cfg, nil
	}
	md, err := toml.DecodeFile(file, &cfg)
	if err != nil {
		return cfg, badInput(fmt.Errorf("%s: %v", file, err))
	}
	if u := md.Undecoded(); len(u) > 0 {
		return cfg, badInput(fmt.Errorf("%s: unknown key %s", file, u[0]))
	}
	if cfg.KeepScore <= 0 || cfg.KeepScore > 1 {
		return cfg, badInput(fmt.Errorf("%s: keep_score = %v must be in (0, 1]", file, cfg.KeepScore))
	}
	return cfg, nil
}

// auditCmd audits tasks on the eight dimensions, waiting for the run and
// printing every verdict; kept tasks go to the keep pool.
func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseAudit(args)
	if err != nil {
		return err
	}
	st, tasks, err := openTasks(ctx, f.storeDir, f.tasks, "audit", stderr)
	if err != nil {
		return err
	}
	eval, err := f.eval.read(ctx, st, "audit eval sets", stderr)
	if err != nil {
		return err
	}
	id := freshID(runID("audit", refIDs(tasks), refIDs(eval), f.cfg, f.keep), f.fresh)
	in := workflows.AuditSweepInput{RunID: id, Tasks: tasks, Eval: eval, Config: f.cfg, Concurrency: f.concurrency, KeepPool: f.keep}
	if in.TaskManifest, err = largeManifest(ctx, st, "audits/"+ids.Clean(id)+"/tasks.json", id, &in.Tasks); err != nil {
		return err
	}
	l := launch{"auditsweep/" + id, fmt.Sprintf("audit %d tasks, keep into %q", len(tasks), f.keep), workflows.AuditSweepWorkflow, in}
	return followRun(ctx, st, l, "tasks audited", f.asJSON, &auditRun{id: id, keep: f.keep}, stdout, stderr)
}

// auditJSONTask is one verdict of `starter audit --json`.
type auditJSONTask struct {
	Name        string             `json:"name"`
	Kept        bool               `json:"kept"`
	Score       float64            `json:"score"`
	HardRejects []string           `json:"hard_rejects"`
	Dimensions  map[string]float64 `json:"dimensions"`
	Flags       []string           `json:"flags,omitempty"`
}

// auditRun is a finished audit run as the CLI prints it.
type auditRun struct {
	id, keep string
	res      workflows.AuditSweepResult
	rep      workflows.AuditReport
}

func (r *auditRun) printJSON(w io.Writer, wid string) error {
	rows := []auditJSONTask{}
	for _, v := range r.rep.Verdicts {
		rows = append(rows, auditJSONTask{v.Name, v.Kept, v.Score, v.HardRejects, v.Dimensions, v.Flags})
	}
	s := r.res.Summary
	return json.NewEncoder(w).Encode(map[string]any{
		"run_id": r.id, "workflow_id": wid, "audited": s.Audited, "kept": s.Kept, "keep_pool": r.keep,
		"hard_rejects": s.HardRejects, "flags": s.Flags, "dimensions": s.Dimensions, "categories": s.Categories,
		"solution_length": s.SolutionLength, "tasks": rows, "report": r.res.Report,
	})
}

func (r *auditRun) print(w io.Writer) {
	s := r.res.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKEPT\tSCORE\tHARD REJECTS\tFLAGS")
	for _, v := range r.rep.Verdicts {
		fmt.Fprintf(tw, "%s\t%v\t%.3f\t%s\t%s\n", v.Name, v.Kept, v.Score, strings.Join(v.HardRejects, ","), strings.Join(v.Flags, ","))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nkept %d of %d (into %q); hard rejects: %s; flags: %s\n", s.Kept, s.Audited, r.keep, kv(s.HardRejects), kv(s.Flags))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DIMENSION\tWEIGHT\tMIN\tMEAN\tMAX\t[0,.2) [.2,.4) [.4,.6) [.6,.8) [.8,1]")
	for _, d := range audit.Dimensions {
		x := s.Dimensions[d.Name]
		fmt.Fprintf(tw, "%s\t%.3f\t%.2f\t%.2f\t%.2f\t%v\n", d.Name, d.Weight, x.Min, x.Mean, x.Max, x.Buckets)
	}
	tw.Flush()
	fmt.Fprintf(w, "categories kept: %s\nsolution length: %s\nreport (every verdict with its evidence): %s\n", kv(s.Categories), kv(s.SolutionLength), r.res.Report.URI)
}

func (r *auditRun) targets() (any, *store.Ref, any) { return &r.res, &r.res.Report, &r.rep }
