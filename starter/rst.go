package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/BurntSushi/toml"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// runID derives a stable ID from what a run computes, so asking again finds
// it (resuming it after a crash) instead of starting over.
func runID(prefix string, parts ...any) string {
	b, _ := json.Marshal(parts)
	h := sha256.Sum256(b)
	return prefix + "-" + hex.EncodeToString(h[:])[:12]
}

// bundleDir validates and stores the tasks of a directory.
func bundleDir(ctx context.Context, st store.Store, dir string, stderr io.Writer) ([]task.Ref, error) {
	ts, err := loadTasks([]string{dir}, stderr)
	if err != nil {
		return nil, err
	}
	var refs []task.Ref
	for _, t := range ts {
		r, err := task.Bundle(ctx, st, t)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Name < refs[j].Name })
	return refs, nil
}

func poolOrDir(ctx context.Context, st store.Store, pool, dir, what string, stderr io.Writer) ([]task.Ref, error) {
	switch {
	case pool != "" && dir != "":
		return nil, badInput(fmt.Errorf("%s: give --pool or --tasks, not both", what))
	case dir != "":
		return bundleDir(ctx, st, dir, stderr)
	case pool != "":
		p, err := task.LoadPool(ctx, st, pool)
		if errors.Is(err, store.ErrNotFound) {
			return nil, badInput(fmt.Errorf("pool %q does not exist", pool))
		}
		if err != nil {
			return nil, err
		}
		return p.Tasks, nil
	}
	return nil, nil
}

func startRun(ctx context.Context, c client.Client, wid, summary string, wf any, in any, info io.Writer) (client.WorkflowRun, error) {
	run, existing, err := startOrFind(ctx, c, wid, client.StartWorkflowOptions{ID: wid, TaskQueue: ids.ControlQueue, StaticSummary: summary}, wf, in)
	if err != nil {
		return nil, err
	}
	if existing {
		fmt.Fprintf(info, "found existing run %s (resuming or reporting it; use --new for another)\n", wid)
	} else {
		fmt.Fprintf(info, "%s: %s\n", wid, summary)
	}
	fmt.Fprintf(info, "  %s\n", config.UIURL(wid))
	return run, nil
}

func synthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	seedsDir := fs.String("seeds", "", "a directory of seed tasks (Harbor format)")
	rounds := fs.Int("rounds", 3, "RST rounds per chain")
	perSeed := fs.Int("per-seed", 1, "chains per seed (each a different RNG stream)")
	pool := fs.String("pool", "", "pool that receives every accepted round")
	rngSeed := fs.Int64("rng-seed", 1, "RNG seed: the same seeds and RNG seed give the same tasks")
	maxVar := fs.Int("max-variations", 3, "variations per round before a seed stops growing")
	kind := fs.String("synthesizer", "procedural", "procedural or llm")
	endpoint := fs.String("endpoint", "", "llm: OpenAI-compatible base URL")
	model := fs.String("model", "", "llm: model name")
	keyEnv := fs.String("api-key-env", "OPENAI_API_KEY", "llm: environment variable holding the API key on the workers")
	conc := fs.Int("concurrency", 2, "chains at once")
	asJSON := fs.Bool("json", false, "print one JSON document")
	fresh := fs.Bool("new", false, "start a new run even if one with the same inputs exists")
	storeDir := fs.String("store", config.StoreDir(), "artifact store")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	spec := activities.SynthSpec{Kind: *kind, Endpoint: *endpoint, Model: *model, APIKeyEnv: *keyEnv, Temperature: 0.7}
	switch {
	case *seedsDir == "" || *pool == "":
		return badInput(errors.New("usage: starter synth --seeds DIR --rounds R --per-seed N --pool NAME"))
	case *rounds < 1 || *perSeed < 1 || *maxVar < 1 || *conc < 1:
		return badInput(fmt.Errorf("synth: --rounds, --per-seed, --max-variations and --concurrency must be at least 1"))
	}
	if err := spec.Validate(); err != nil {
		return badInput(fmt.Errorf("synth: --%v", err))
	}
	if err := task.ValidatePoolName(*pool); err != nil {
		return badInput(err)
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	seeds, err := bundleDir(ctx, st, *seedsDir, stderr)
	if err != nil {
		return err
	}
	c, err := config.Dial(ctx, slog.LevelError)
	if err != nil {
		return err
	}
	defer c.Close()
	var seedIDs []string
	for _, s := range seeds {
		seedIDs = append(seedIDs, s.ID)
	}
	id := runID("synth", seedIDs, *rounds, *perSeed, *rngSeed, *maxVar, spec, *pool)
	if *fresh {
		id += "-" + time.Now().UTC().Format("20060102T150405")
	}
	in := workflows.SynthSweepInput{RunID: id, Seeds: seeds, PerSeed: *perSeed, Rounds: *rounds, MaxVariations: *maxVar,
		RNGSeed: *rngSeed, Synth: spec, Concurrency: *conc, Pool: *pool}
	info := stdout
	if *asJSON {
		info = stderr
	}
	run, err := startRun(ctx, c, "synthsweep/"+id, fmt.Sprintf("RST: %d seeds × %d chains × %d rounds into %s", len(seeds), *perSeed, *rounds, *pool), workflows.SynthSweepWorkflow, in, info)
	if err != nil {
		return err
	}
	var res workflows.SynthSweepResult
	if err := waitWithProgress(ctx, c, run, stderr, "chains done", &res); err != nil {
		return err
	}
	var rep workflows.SynthReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			Name   string   `json:"name"`
			ID     string   `json:"id"`
			Seed   string   `json:"seed"`
			Chain  int      `json:"chain"`
			Round  int      `json:"round"`
			Parent string   `json:"parent"`
			Steps  []string `json:"steps"`
		}
		var rows []row
		for _, ch := range rep.Chains {
			for _, a := range ch.Accepted {
				rows = append(rows, row{a.Task.Name, a.Task.ID, ch.Seed.Name, ch.Chain, a.Round, a.Parent, a.Steps})
			}
		}
		return json.NewEncoder(stdout).Encode(map[string]any{
			"run_id": id, "workflow_id": run.GetID(), "pool": *pool, "synthesized": res.Summary.Synthesized,
			"variations": res.Summary.Variations, "rejected": res.Summary.Rejected, "stopped_chains": res.Summary.Stopped,
			"categories": res.Summary.Categories, "solution_length": res.Summary.SolutionLength,
			"added_to_pool": res.Summary.AddedToPool, "tasks": rows, "report": res.Report,
		})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEED\tCHAIN\tACCEPTED\tREJECTED\tSTOPPED")
	for _, ch := range rep.Chains {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", ch.Seed.Name, ch.Chain, len(ch.Accepted), len(ch.Rejected), ch.Stopped)
	}
	tw.Flush()
	s := res.Summary
	fmt.Fprintf(stdout, "\n%d tasks synthesized from %d seeds (%d candidates tried); %d added to pool %s\n", s.Synthesized, s.Seeds, s.Variations, s.AddedToPool, *pool)
	fmt.Fprintf(stdout, "rejected: %s\ncategories: %s\nsolution length: %s\nreport: %s\n", kv(s.Rejected), kv(s.Categories), kv(s.SolutionLength), res.Report.URI)
	return nil
}

func kv(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	pool := fs.String("pool", "", "pool to audit")
	tasksDir := fs.String("tasks", "", "a task directory or a directory of them, in place of --pool")
	keep := fs.String("keep-pool", "", "pool that receives the kept tasks")
	evalDir := fs.String("eval-tasks", "", "eval task sets (directories) to check contamination against")
	evalPool := fs.String("eval-pool", "", "an eval pool to check contamination against")
	cfgFile := fs.String("config", "", "TOML file of thresholds (keep_score, duplicate_jaccard, contamination_share, mutants, ...)")
	conc := fs.Int("concurrency", 2, "tasks audited at once (each runs 3 + mutants rollouts)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	fresh := fs.Bool("new", false, "start a new run even if one with the same inputs exists")
	storeDir := fs.String("store", config.StoreDir(), "artifact store")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if (*pool == "") == (*tasksDir == "") {
		return badInput(errors.New("usage: starter audit (--pool NAME | --tasks DIR) --keep-pool NAME"))
	}
	if *keep != "" {
		if err := task.ValidatePoolName(*keep); err != nil {
			return badInput(err)
		}
	}
	cfg := audit.DefaultConfig()
	if *cfgFile != "" {
		md, err := toml.DecodeFile(*cfgFile, &cfg)
		if err != nil {
			return badInput(fmt.Errorf("%s: %v", *cfgFile, err))
		}
		if u := md.Undecoded(); len(u) > 0 {
			return badInput(fmt.Errorf("%s: unknown key %s", *cfgFile, u[0]))
		}
		if cfg.KeepScore <= 0 || cfg.KeepScore > 1 {
			return badInput(fmt.Errorf("%s: keep_score = %v must be in (0, 1]", *cfgFile, cfg.KeepScore))
		}
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	tasks, err := poolOrDir(ctx, st, *pool, *tasksDir, "audit", stderr)
	if err != nil {
		return err
	}
	eval, err := poolOrDir(ctx, st, *evalPool, *evalDir, "audit eval sets", stderr)
	if err != nil {
		return err
	}
	c, err := config.Dial(ctx, slog.LevelError)
	if err != nil {
		return err
	}
	defer c.Close()
	var tids, eids []string
	for _, t := range tasks {
		tids = append(tids, t.ID)
	}
	for _, t := range eval {
		eids = append(eids, t.ID)
	}
	id := runID("audit", tids, eids, cfg, *keep)
	if *fresh {
		id += "-" + time.Now().UTC().Format("20060102T150405")
	}
	info := stdout
	if *asJSON {
		info = stderr
	}
	in := workflows.AuditSweepInput{RunID: id, Tasks: tasks, Eval: eval, Config: cfg, Concurrency: *conc, KeepPool: *keep}
	run, err := startRun(ctx, c, "auditsweep/"+id, fmt.Sprintf("audit %d tasks, keep into %q", len(tasks), *keep), workflows.AuditSweepWorkflow, in, info)
	if err != nil {
		return err
	}
	var res workflows.AuditSweepResult
	if err := waitWithProgress(ctx, c, run, stderr, "tasks audited", &res); err != nil {
		return err
	}
	var rep workflows.AuditReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return err
	}
	s := res.Summary
	if *asJSON {
		type row struct {
			Name        string             `json:"name"`
			Kept        bool               `json:"kept"`
			Score       float64            `json:"score"`
			HardRejects []string           `json:"hard_rejects"`
			Dimensions  map[string]float64 `json:"dimensions"`
			Flags       []string           `json:"flags,omitempty"`
		}
		rows := []row{}
		for _, v := range rep.Verdicts {
			rows = append(rows, row{v.Name, v.Kept, v.Score, v.HardRejects, v.Dimensions, v.Flags})
		}
		return json.NewEncoder(stdout).Encode(map[string]any{
			"run_id": id, "workflow_id": run.GetID(), "audited": s.Audited, "kept": s.Kept, "keep_pool": *keep,
			"hard_rejects": s.HardRejects, "flags": s.Flags, "dimensions": s.Dimensions, "categories": s.Categories,
			"solution_length": s.SolutionLength, "tasks": rows, "report": res.Report,
		})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKEPT\tSCORE\tHARD REJECTS\tFLAGS")
	for _, v := range rep.Verdicts {
		fmt.Fprintf(tw, "%s\t%v\t%.3f\t%s\t%s\n", v.Name, v.Kept, v.Score, strings.Join(v.HardRejects, ","), strings.Join(v.Flags, ","))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nkept %d of %d (into %q); hard rejects: %s; flags: %s\n", s.Kept, s.Audited, *keep, kv(s.HardRejects), kv(s.Flags))
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DIMENSION\tWEIGHT\tMIN\tMEAN\tMAX\t[0,.2) [.2,.4) [.4,.6) [.6,.8) [.8,1]")
	for _, d := range audit.Dimensions {
		x := s.Dimensions[d.Name]
		fmt.Fprintf(tw, "%s\t%.3f\t%.2f\t%.2f\t%.2f\t%v\n", d.Name, d.Weight, x.Min, x.Mean, x.Max, x.Buckets)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "categories kept: %s\nsolution length: %s\nreport (every verdict with its evidence): %s\n", kv(s.Categories), kv(s.SolutionLength), res.Report.URI)
	return nil
}
