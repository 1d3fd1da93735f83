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

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// synthFlags are the flags of `starter synth`.
type synthFlags struct {
	seedsDir, pool          string
	rounds, perSeed, maxVar int
	rngSeed                 int64
	spec                    activities.SynthSpec
	runFlags
}

func parseSynth(args []string) (*synthFlags, error) {
	f := &synthFlags{spec: activities.SynthSpec{Temperature: 0.7}}
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.StringVar(&f.seedsDir, "seeds", "", "a directory of seed tasks (Harbor format)")
	fs.IntVar(&f.rounds, "rounds", 3, "RST rounds per chain")
	fs.IntVar(&f.perSeed, "per-seed", 1, "chains per seed (each a different RNG stream)")
	fs.StringVar(&f.pool, "pool", "", "pool that receives every accepted round")
	fs.Int64Var(&f.rngSeed, "rng-seed", 1, "RNG seed: the same seeds and RNG seed give the same tasks")
	fs.IntVar(&f.maxVar, "max-variations", 3, "variations per round before a seed stops growing")
	fs.StringVar(&f.spec.Kind, "synthesizer", "procedural", "procedural or llm")
	fs.StringVar(&f.spec.Endpoint, "endpoint", "", "llm: OpenAI-compatible base URL")
	fs.StringVar(&f.spec.Model, "model", "", "llm: model name")
	fs.StringVar(&f.spec.APIKeyEnv, "api-key-env", "OPENAI_API_KEY", "llm: environment variable holding the API key on the workers")
	f.register(fs, 2, "chains at once")
	if _, err := parse(fs, args); err != nil {
		return nil, err
	}
	switch {
	case f.seedsDir == "" || f.pool == "":
		return nil, badInput(errors.New("usage: starter synth --seeds DIR --rounds R --per-seed N --pool NAME"))
	case f.rounds < 1 || f.perSeed < 1 || f.maxVar < 1 || f.concurrency < 1:
		return nil, badInput(fmt.Errorf("synth: --rounds, --per-seed, --max-variations and --concurrency must be at least 1"))
	}
	if err := f.spec.Validate(); err != nil {
		return nil, badInput(fmt.Errorf("synth: --%v", err))
	}
	if err := task.ValidatePoolName(f.pool); err != nil {
		return nil, badInput(err)
	}
	return f, nil
}

// synthCmd grows seed tasks by recursive synthesis into a pool, waiting for
// the run and printing what it made.
func synthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseSynth(args)
	if err != nil {
		return err
	}
	st, err := openStore(f.storeDir)
	if err != nil {
		return err
	}
	seeds, err := bundleDir(ctx, st, f.seedsDir, stderr)
	if err != nil {
		return err
	}
	id := freshID(runID("synth", refIDs(seeds), f.rounds, f.perSeed, f.rngSeed, f.maxVar, f.spec, f.pool), f.fresh)
	in := workflows.SynthSweepInput{RunID: id, Seeds: seeds, PerSeed: f.perSeed, Rounds: f.rounds, MaxVariations: f.maxVar,
		RNGSeed: f.rngSeed, Synth: f.spec, Concurrency: f.concurrency, Pool: f.pool}
	if in.SeedManifest, err = largeManifest(ctx, st, "synth/"+ids.Clean(id)+"/seeds.json", id, &in.Seeds); err != nil {
		return err
	}
	l := launch{"synthsweep/" + id, fmt.Sprintf("RST: %d seeds × %d chains × %d rounds into %s", len(seeds), f.perSeed, f.rounds, f.pool), workflows.SynthSweepWorkflow, in}
	return followRun(ctx, st, l, "chains done", f.asJSON, &synthRun{id: id, pool: f.pool}, stdout, stderr)
}

// synthJSONTask is one accepted task of `starter synth --json`.
type synthJSONTask struct {
	Name   string   `json:"name"`
	ID     string   `json:"id"`
	Seed   string   `json:"seed"`
	Chain  int      `json:"chain"`
	Round  int      `json:"round"`
	Parent string   `json:"parent"`
	Steps  []string `json:"steps"`
}

// synthRun is a finished synthesis run as the CLI prints it.
type synthRun struct {
	id, pool string
	res      workflows.SynthSweepResult
	rep      workflows.SynthReport
}

func (r *synthRun) printJSON(w io.Writer, wid string) error {
	var rows []synthJSONTask
	for _, ch := range r.rep.Chains {
		for _, a := range ch.Accepted {
			rows = append(rows, synthJSONTask{a.Task.Name, a.Task.ID, ch.Seed.Name, ch.Chain, a.Round, a.Parent, a.Steps})
		}
	}
	s := r.res.Summary
	return json.NewEncoder(w).Encode(map[string]any{
		"run_id": r.id, "workflow_id": wid, "pool": r.pool, "synthesized": s.Synthesized,
		"variations": s.Variations, "rejected": s.Rejected, "stopped_chains": s.Stopped, "failed_chains": s.Failed,
		"categories": s.Categories, "solution_length": s.SolutionLength,
		"added_to_pool": s.AddedToPool, "tasks": rows, "report": r.res.Report,
	})
}

func (r *synthRun) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEED\tCHAIN\tACCEPTED\tREJECTED\tSTOPPED")
	for _, ch := range r.rep.Chains {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", ch.Seed.Name, ch.Chain, len(ch.Accepted), len(ch.Rejected), ch.Stopped)
	}
	tw.Flush()
	s := r.res.Summary
	fmt.Fprintf(w, "\n%d tasks synthesized from %d seeds (%d candidates tried); %d added to pool %s\n", s.Synthesized, s.Seeds, s.Variations, s.AddedToPool, r.pool)
	fmt.Fprintf(w, "rejected: %s\ncategories: %s\nsolution length: %s\nreport: %s\n", kv(s.Rejected), kv(s.Categories), kv(s.SolutionLength), r.res.Report.URI)
}

// failure makes a run whose chains failed (an unreachable or misconfigured
// synthesizer endpoint, say) exit non-zero after printing, naming the cause.
func (r *synthRun) failure() error {
	if r.res.Summary.Failed == 0 {
		return nil
	}
	for _, ch := range r.rep.Chains {
		if strings.HasPrefix(ch.Stopped, workflows.ChainFailedPrefix) {
			return fmt.Errorf("%d of %d chains failed; %s: %s", r.res.Summary.Failed, r.res.Summary.Chains, ch.Seed.Name, ch.Stopped)
		}
	}
	return fmt.Errorf("%d of %d chains failed", r.res.Summary.Failed, r.res.Summary.Chains)
}

func (r *synthRun) targets() (any, *store.Ref, any) { return &r.res, &r.res.Report, &r.rep }
