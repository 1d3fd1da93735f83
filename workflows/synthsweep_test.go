package workflows

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// synthFake mocks a synthesis sweep's chains and activities and records
// what they were asked, across the runs of a continued sweep.
type synthFake struct {
	mu       sync.Mutex
	runs     map[string]int             // chain workflow ID -> times run
	results  map[string]SynthesisResult // chains that completed
	imports  [][]task.Ref               // ImportToPool calls
	held     []string                   // SynthesisChainResult calls
	failOnce map[string]bool            // chain IDs whose first run fails
	// report, when set, answers BuildSynthReport instead of the chunks.
	report func(SynthReportInput) SynthSweepResult
}

func newSynthFake() *synthFake {
	return &synthFake{runs: map[string]int{}, results: map[string]SynthesisResult{}, failOnce: map[string]bool{}}
}

func synthSeeds(n int) []task.Ref {
	seeds := make([]task.Ref, n)
	for i := range seeds {
		seeds[i] = task.Ref{ID: fmt.Sprintf("%016x", 0xa000+i), Name: fmt.Sprintf("s%04d", i), Bundle: testTask.Bundle}
	}
	return seeds
}

// fakeChain is the chain on seed s<i>: (i+chain)%3 accepted rounds and
// chain%2+(i%2) rejections; it stops early unless it has 2 rounds; seeds
// with i%101 == 7 fail.
func fakeChain(in SynthesisInput) (SynthesisResult, error) {
	var i int
	fmt.Sscanf(in.Seed.Name, "s%d", &i)
	if i%101 == 7 {
		return SynthesisResult{}, errors.New("synthesizer endpoint down")
	}
	r := SynthesisResult{Seed: in.Seed, Chain: in.Chain, Accepted: []RoundRecord{}, Rejected: []Rejection{}}
	for round := 1; round <= (i+in.Chain)%3; round++ {
		name := fmt.Sprintf("t-%s-c%d-r%d", in.Seed.Name, in.Chain, round)
		r.Accepted = append(r.Accepted, RoundRecord{Round: round, Task: task.Ref{ID: "id-" + name, Name: name, Bundle: testTask.Bundle},
			Categories: []string{[]string{"file", "text"}[round%2]}})
	}
	for v := 0; v < in.Chain%2+i%2; v++ {
		r.Rejected = append(r.Rejected, Rejection{Round: 1, Variation: v, Class: []string{"oracle_failed", "nop_passed"}[v]})
	}
	if len(r.Accepted) < 2 {
		r.Stopped = "round: 3 variations rejected"
	}
	return r, nil
}

// env is one run's test environment.
func (f *synthFake) env() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	registerSweepFakes(env)
	env.RegisterActivityWithOptions(func(ctx context.Context, in SynthReportInput) (SynthSweepResult, error) {
		if f.report != nil {
			return f.report(in), nil
		}
		var chains []SynthesisResult
		for n := 0; n < in.Chunks; n++ {
			var chunk []SynthesisResult
			if err := memGet(SynthChunkKey(in.RunID, n), &chunk); err != nil {
				return SynthSweepResult{}, err
			}
			chains = append(chains, chunk...)
		}
		rep, err := AssembleSynthReport(in, chains)
		if err != nil {
			return SynthSweepResult{}, err
		}
		ref, err := storeOK(ctx, activities.StoreJSONInput{Key: SynthReportKey(in.RunID), Value: rep})
		return SynthSweepResult{Summary: rep.Summary, Report: ref, Tasks: AcceptedTasks(chains)}, err
	}, activity.RegisterOptions{Name: ActivityBuildSynthReport})
	env.RegisterActivityWithOptions(func(_ context.Context, in ChildResultInput) (ChildOutcome[SynthesisResult], error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.held = append(f.held, in.WorkflowID)
		if r, ok := f.results[in.WorkflowID]; ok {
			return ChildOutcome[SynthesisResult]{Closed: true, Status: "Completed", Result: &r}, nil
		}
		return ChildOutcome[SynthesisResult]{Closed: true, Status: "Failed"}, nil
	}, activity.RegisterOptions{Name: ActivitySynthesisChainResult})
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK)
	env.OnActivity(act.ImportToPool, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ImportInput) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.imports = append(f.imports, in.Tasks)
		return len(in.Tasks), nil
	})
	env.OnWorkflow(SynthesisWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in SynthesisInput) (SynthesisResult, error) {
		wid := workflow.GetInfo(ctx).WorkflowExecution.ID
		f.mu.Lock()
		defer f.mu.Unlock()
		f.runs[wid]++
		if f.failOnce[wid] && f.runs[wid] == 1 {
			return SynthesisResult{}, errors.New("worker lost")
		}
		r, err := fakeChain(in)
		if err == nil {
			f.results[wid] = r
		}
		return r, err
	})
	return env
}

// sweep runs a synthesis sweep to its end, one test environment per run,
// checking that each continued run's input carries no seed and that the
// progress query counts across runs. It returns the result and the runs.
func (f *synthFake) sweep(t *testing.T, in SynthSweepInput, oneRun bool) (SynthSweepResult, int) {
	t.Helper()
	for runs := 1; runs <= 20; runs++ {
		env := f.env()
		if oneRun {
			env.OnGetVersion("synth-sweep-windowed", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
		}
		env.ExecuteWorkflow(SynthSweepWorkflow, in)
		var prog Progress
		if v, err := env.QueryWorkflow(QueryProgress); err != nil || v.Get(&prog) != nil {
			t.Fatalf("run %d: progress query: %v", runs, err)
		}
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			if err != nil {
				t.Fatalf("run %d: %v", runs, err)
			}
			var out SynthSweepResult
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if prog.Done != prog.Total || prog.Resolved != out.Summary.Synthesized {
				t.Errorf("last run's progress %+v; want all done, %d resolved", prog, out.Summary.Synthesized)
			}
			return out, runs
		}
		in = SynthSweepInput{}
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
			t.Fatal(err)
		}
		w := in.Window
		if len(in.Seeds) != 0 || in.SeedManifest == nil || w == nil || w.Runs != runs {
			t.Fatalf("run %d hands on %d seeds inline, manifest %v, window %+v: want a manifest and a window only", runs, len(in.Seeds), in.SeedManifest, w)
		}
		if prog.Done != w.Next || prog.Total != w.Summary.Seeds*in.PerSeed || prog.Resolved != w.Summary.Synthesized {
			t.Errorf("run %d: progress %+v, window next %d, %d synthesized", runs, prog, w.Next, w.Summary.Synthesized)
		}
	}
	t.Fatal("the sweep did not end in 20 runs")
	return SynthSweepResult{}, 0
}

// A sweep of 520 seeds × 2 chains (1,040) runs 500 chains a run, a page of
// 100 at a time, in three runs: every chain once, each page's results in two
// chunks and its accepted tasks imported once, and the counts of all.
func TestSynthSweepRunsEveryChainOnceAcrossRuns(t *testing.T) {
	const nSeeds, perSeed = 520, 2
	f := newSynthFake()
	out, runs := f.sweep(t, SynthSweepInput{RunID: "big-synth", Seeds: synthSeeds(nSeeds), PerSeed: perSeed, Rounds: 2, Concurrency: 8, Pool: "synth"}, false)
	if runs != 3 {
		t.Errorf("%d runs, want 3 (500, 500, 40 chains)", runs)
	}
	if len(f.runs) != nSeeds*perSeed {
		t.Errorf("%d chains ran, want %d", len(f.runs), nSeeds*perSeed)
	}
	for wid, n := range f.runs {
		if n != 1 {
			t.Errorf("chain %s ran %d times", wid, n)
		}
	}
	want := NewSynthSummary(nSeeds)
	want.Chains = nSeeds * perSeed
	for i := 0; i < nSeeds; i++ {
		for c := 0; c < perSeed; c++ {
			if i%101 == 7 {
				want.Failed++
				continue
			}
			acc, rej := (i+c)%3, c%2+i%2
			want.Synthesized += acc
			want.Variations += acc + rej
			if acc < 2 {
				want.Stopped++
			}
			for r := 1; r <= acc; r++ {
				want.Categories[[]string{"file", "text"}[r%2]]++
				want.SolutionLength[fmt.Sprintf("%d extra steps", r)]++
			}
			for v := 0; v < rej; v++ {
				want.Rejected[[]string{"oracle_failed", "nop_passed"}[v]]++
			}
		}
	}
	want.AddedToPool = want.Synthesized
	if !reflect.DeepEqual(out.Summary, want) {
		t.Errorf("summary\n %+v\nwant\n %+v", out.Summary, want)
	}
	// One import per page (11), each holding only that page's chains' tasks.
	if len(f.imports) != 11 {
		t.Errorf("%d imports, want one per page: 11", len(f.imports))
	}
	seen := map[string]bool{}
	for p, imp := range f.imports {
		for _, tk := range imp {
			var s, c int
			fmt.Sscanf(tk.Name, "t-s%d-c%d", &s, &c)
			if k := s*perSeed + c; k/100 != p || seen[tk.ID] {
				t.Errorf("import %d has %s (chain %d, page %d; seen before %v)", p, tk.Name, k, k/100, seen[tk.ID])
			}
			seen[tk.ID] = true
		}
	}
	if len(seen) != want.Synthesized || len(out.Tasks) != want.Synthesized {
		t.Errorf("%d tasks imported, %d in the result; want %d", len(seen), len(out.Tasks), want.Synthesized)
	}
	var c0 []SynthesisResult
	if err := memGet(SynthChunkKey("big-synth", 0), &c0); err != nil || len(c0) != 50 || c0[0].Seed.Name != "s0000" || c0[1].Chain != 1 {
		t.Errorf("chunk 0: %d chains (%v), want chains 0-49 from s0000 chain 0", len(c0), err)
	}
	if err := memGet(SynthChunkKey("big-synth", 20), &c0); err != nil || len(c0) != 40 {
		t.Errorf("chunk 20: %d chains (%v), want the last 40", len(c0), err)
	}
}

// The one-run sweep (histories from before synth-sweep-windowed), the
// windowed sweep given its seeds inline and the windowed sweep given a seed
// manifest (tiny pages, several runs) make the same summary, tasks and
// report chains.
func TestSynthSweepWindowedAgreesWithOneRun(t *testing.T) {
	defer func(p, c int) { SynthPageSize, SynthChunkSize = p, c }(SynthPageSize, SynthChunkSize)
	SynthPageSize, SynthChunkSize = 7, 3
	seeds := synthSeeds(30)
	manifest, err := storeOK(context.Background(), activities.StoreJSONInput{Key: "synth-test/seeds.json", Value: task.Pool{Name: "m", Tasks: seeds}})
	if err != nil {
		t.Fatal(err)
	}
	base := SynthSweepInput{PerSeed: 3, Rounds: 2, Concurrency: 2, Pool: "synth", ContinueEvery: 20}
	var reports []SynthReport
	var results []SynthSweepResult
	for _, c := range []struct {
		run      string
		manifest bool
		oneRun   bool
		runs     int
	}{{"agree-one-run", false, true, 1}, {"agree-inline", false, false, 5}, {"agree-manifest", true, false, 5}} {
		in := base
		in.RunID = c.run
		if c.manifest {
			in.SeedManifest = &manifest
		} else {
			in.Seeds = seeds
		}
		out, runs := newSynthFake().sweep(t, in, c.oneRun)
		if runs != c.runs {
			t.Errorf("%s: %d runs, want %d", c.run, runs, c.runs)
		}
		var rep SynthReport
		if err := memGet(SynthReportKey(c.run), &rep); err != nil {
			t.Fatal(err)
		}
		rep.RunID = ""
		reports, results = append(reports, rep), append(results, out)
	}
	if results[0].Summary.Chains != 90 || results[0].Summary.Failed != 3 {
		t.Fatalf("one-run summary %+v: want 90 chains, 3 failed", results[0].Summary)
	}
	for i := 1; i < 3; i++ {
		a, b := fmt.Sprintf("%+v %v", results[0].Summary, results[0].Tasks), fmt.Sprintf("%+v %v", results[i].Summary, results[i].Tasks)
		if a != b {
			t.Errorf("sweep %d: summary and tasks\n %s\nwant (one run)\n %s", i, b, a)
		}
		if !reflect.DeepEqual(reports[i], reports[0]) {
			t.Errorf("sweep %d: report differs from the one run's", i)
		}
	}
}

// A chain whose ID a completed run holds (a sweep started again after it
// failed) is not run again: its result is read from that run; a chain whose
// earlier run failed runs again.
func TestSynthSweepReusesACompletedChainAndRerunsAFailedOne(t *testing.T) {
	defer func(p int) { SynthPageSize = p }(SynthPageSize)
	SynthPageSize = 1
	seeds := synthSeeds(3)
	// The manifest names seeds 1 and 2 twice, pages apart: the later page of
	// each starts the same chain ID again.
	manifest, err := storeOK(context.Background(), activities.StoreJSONInput{Key: "synth-test/again.json",
		Value: task.Pool{Name: "again", Tasks: []task.Ref{seeds[1], seeds[2], seeds[0], seeds[1], seeds[2]}}})
	if err != nil {
		t.Fatal(err)
	}
	f := newSynthFake()
	wid := func(s int) string { return ids.SynthesisWorkflowID("again", seeds[s].ID, 0) }
	f.failOnce[wid(2)] = true
	var got SynthReportInput
	f.report = func(in SynthReportInput) SynthSweepResult {
		got = in // five chains of three seeds: AssembleSynthReport would refuse them
		return SynthSweepResult{Summary: in.Summary}
	}
	env := f.env()
	env.ExecuteWorkflow(SynthSweepWorkflow, SynthSweepInput{RunID: "again", SeedManifest: &manifest, Rounds: 2, Pool: "synth"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if f.runs[wid(0)] != 1 || f.runs[wid(1)] != 1 || f.runs[wid(2)] != 2 {
		t.Errorf("chain runs %v: want seed 1 once (completed, then reused), seed 0 once, seed 2 twice (failed, run again)", f.runs)
	}
	if strings.Join(f.held, ",") != wid(1) {
		t.Errorf("results read from Temporal for %v, want only %s", f.held, wid(1))
	}
	s := got.Summary
	if s.Chains != 5 || s.Failed != 1 || s.Synthesized != 1+0+1+2 || len(f.imports) != 3 {
		t.Errorf("summary %+v, %d imports: want 5 chains, 1 failed (seed 2's first), 4 tasks (seed 1's twice, seed 2's once) in 3 imports", s, len(f.imports))
	}
}

// The report builder refuses chunks that lost or doubled a chain, or that
// count other than the sweep did.
func TestAssembleSynthReportRefusesLostOrDoubledChains(t *testing.T) {
	seeds := synthSeeds(2)
	var chains []SynthesisResult
	sum := NewSynthSummary(2)
	for _, s := range seeds {
		r, _ := fakeChain(SynthesisInput{Seed: s, Chain: 0})
		chains = append(chains, r)
		sum.Add(r)
	}
	in := SynthReportInput{RunID: "r", PerSeed: 1, Chunks: 1, Summary: sum}
	if rep, err := AssembleSynthReport(in, chains); err != nil || len(rep.Chains) != 2 {
		t.Fatalf("a whole report: %v", err)
	}
	off := in
	off.Summary.Synthesized++
	for want, c := range map[string]struct {
		in     SynthReportInput
		chains []SynthesisResult
	}{
		"is there twice":       {in, []SynthesisResult{chains[0], chains[0]}},
		"1 chains in 1 chunks": {in, chains[:1]},
		"the chunks count":     {off, chains},
	} {
		if _, err := AssembleSynthReport(c.in, c.chains); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// Bad input names the field at fault.
func TestSynthSweepInputNamesTheFieldAtFault(t *testing.T) {
	seeds := synthSeeds(1)
	for want, in := range map[string]SynthSweepInput{
		"no seeds":                      {Pool: "p"},
		"pool is required":              {Seeds: seeds},
		"give one, not both":            {Seeds: seeds, SeedManifest: &store.Ref{URI: "file:///m"}, Pool: "p"},
		"seed_manifest.uri is empty":    {SeedManifest: &store.Ref{}, Pool: "p"},
		"continue_every -1: must be at": {Seeds: seeds, Pool: "p", ContinueEvery: -1},
	} {
		if err := in.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
