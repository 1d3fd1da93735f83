// Command bench measures t1flow's sandbox costs against bare Docker doing the
// same work, in the same run, and writes the ratios to docs/bench.md.
//
//	lifecycle: the sandbox activities (create → exec → destroy) against `docker run --rm`
//	per turn:  the RolloutWorkflow turn loop on the real dev server against a bare
//	           `docker exec` loop, both running a 100 ms command
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

func main() {
	out := flag.String("out", "docs/bench.md", "where to write the results")
	n := flag.Int("n", 15, "lifecycle repetitions")
	turns := flag.Int("turns", 30, "turns per rollout in the turn-loop benchmark")
	only := flag.String("only", "", "\"verify\", \"audit\", \"harbor\" or \"scale\": run only that benchmark and rewrite just its section of -out")
	auditOnly := flag.Bool("audit-only", false, "the same as -only audit")
	verifyN := flag.Int("verify-n", 3, "oracle sandboxes per task and path in the verification benchmark")
	verifyTasks := flag.String("verify-tasks", "", "comma-separated task names: verify only these (default: every examples/tasks and examples/tb2 task)")
	var so scaleOpts
	flag.IntVar(&so.n, "scale-n", 100000, "-only scale: rollouts in the sweep")
	flag.IntVar(&so.tasks, "scale-tasks", 1000, "-only scale: tasks in the manifest (rollouts = tasks × attempts)")
	flag.IntVar(&so.concurrency, "scale-concurrency", 256, "-only scale: the sweep's window")
	flag.DurationVar(&so.sleep, "scale-sleep", 20*time.Millisecond, "-only scale: how long each sleep-backend sandbox activity sleeps")
	flag.BoolVar(&so.dbFile, "scale-db-file", false, "-only scale: the dev server keeps its SQLite in a file (in memory by default: ~0.13 MB per rollout)")
	flag.Parse()
	if *auditOnly {
		*only = "audit"
	}
	var err error
	switch *only {
	case "":
		err = run(*out, fullSizes(*n, *turns, *verifyN, *verifyTasks))
	case "verify":
		err = runVerifyOnly(*out, *verifyN, *verifyTasks)
	case "audit":
		err = runAuditOnly(*out)
	case "harbor":
		err = runHarborOnly(*out)
	case "scale":
		err = runScaleOnly(*out, so)
	default:
		err = fmt.Errorf("-only %q: the benchmarks that run alone are \"verify\", \"audit\", \"harbor\" and \"scale\"", *only)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// env is what every benchmark shares: Docker, a store, one example task
// (bundled and built) and the activities, all under a temporary directory.
type env struct {
	state string
	d     *sandbox.Docker
	st    *store.Local
	tmp   string
	tk    *task.Task
	ref   task.Ref
	img   string
	acts  *activities.Activities
}

// setup builds the shared environment; cleanup (always safe to call)
// removes its temporary directory.
func setup(ctx context.Context) (e *env, cleanup func(), err error) {
	e = &env{state: testenv.StateDir()}
	cleanup = func() {
		if e.tmp != "" {
			os.RemoveAll(e.tmp)
		}
	}
	return e, cleanup, e.build(ctx)
}

func (e *env) build(ctx context.Context) error {
	var err error
	if e.d, err = sandbox.NewDocker(ctx, e.state); err != nil {
		return err
	}
	if _, err := e.d.EnsureBaseImage(ctx); err != nil {
		return err
	}
	if e.tmp, err = os.MkdirTemp("", "t1flow-bench-"); err != nil {
		return err
	}
	if e.st, err = store.NewLocal(filepath.Join(e.tmp, "store")); err != nil {
		return err
	}
	if e.tk, err = task.Load(filepath.Join(testenv.RepoRoot(), "examples/tasks/log-level-counter")); err != nil {
		return err
	}
	if e.ref, err = task.Bundle(ctx, e.st, e.tk); err != nil {
		return err
	}
	if e.img, _, err = e.d.EnsureTaskImage(ctx, e.tk, nil); err != nil {
		return err
	}
	host := fmt.Sprintf("bench-%d", os.Getpid())
	e.acts = &activities.Activities{Docker: e.d, Store: e.st, Host: host, TaskCache: filepath.Join(e.tmp, "cache"), EpisodeDir: filepath.Join(e.tmp, "episodes")}
	return nil
}

// runVerifyOnly measures sealed verification alone and splices its section
// into out, leaving the other figures as they were.
func runVerifyOnly(out string, n int, only string) error {
	ctx := context.Background()
	e, cleanup, err := setup(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	sec, err := benchVerify(ctx, e, n, only)
	if err != nil {
		return err
	}
	fmt.Print(sec)
	return spliceSection(out, verifySection, sec)
}

func run(out string, sz sizes) error {
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
	outs := runSections(ctx, &bench{e: e, c: c, sz: sz}, sections)
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := assemble(string(old), outs, time.Now().UTC().Format("2006-01-02"))
	if err := writeAtomic(out, doc); err != nil {
		return err
	}
	fmt.Print(doc)
	return failures(outs)
}

// sandboxSection is the heading of the sandbox and turn-loop figures.
const sandboxSection = "## Sandboxes and the turn loop"

// benchSandbox: the sandbox lifecycle and the turn loop against bare Docker,
// the trajectory store against a raw copy, and the harness's overhead.
func benchSandbox(ctx context.Context, b *bench) (string, error) {
	e, sz := b.e, b.sz
	lifeOurs, lifeBare, err := benchLifecycle(ctx, e, sz.lifecycleN)
	if err != nil {
		return "", err
	}
	perTurnOurs, err := benchTurnLoop(ctx, b.c, e.ref, sz.turns, sz.loopReps)
	if err != nil {
		return "", err
	}
	perTurnBare, err := benchBareTurns(e.img, sz.turns)
	if err != nil {
		return "", err
	}
	traj, err := benchTrajectory(e.tmp)
	if err != nil {
		return "", err
	}
	harness, err := benchHarness(ctx, b.c, e.ref, e.tmp, sz.harnessTurns)
	if err != nil {
		return "", err
	}
	var s strings.Builder
	writeSandboxTable(&s, sz, lifeOurs, lifeBare, perTurnOurs, perTurnBare)
	s.WriteString(traj)
	writeSandboxNotes(&s, perTurnOurs, perTurnBare)
	s.WriteString(harness)
	return s.String(), nil
}

// benchLifecycle times create → exec → destroy through the activities,
// interleaved with the `docker run --rm` baseline so both see the same
// machine load; it returns both medians.
func benchLifecycle(ctx context.Context, e *env, n int) (time.Duration, time.Duration, error) {
	var ours, bare []time.Duration
	for i := 0; i < n+1; i++ {
		t0 := time.Now()
		cs, err := e.acts.CreateSandbox(ctx, activities.CreateSandboxInput{Task: e.ref, RolloutID: fmt.Sprintf("bench.%d", i), SandboxAttempt: 1})
		if err != nil {
			return 0, 0, err
		}
		if _, err := e.acts.AgentTurn(ctx, activities.TurnInput{Sandbox: cs.Sandbox, Task: e.ref, Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"true"}}, TimeoutSec: 30}); err != nil {
			return 0, 0, err
		}
		if err := e.acts.DestroySandbox(ctx, activities.DestroyInput{Sandbox: cs.Sandbox}); err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		if o, err := exec.Command("docker", "run", "--rm", "--network", "none", e.img, "true").CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("docker run: %v %s", err, o)
		}
		t2 := time.Now()
		if i > 0 { // the first round warms caches
			ours, bare = append(ours, t1.Sub(t0)), append(bare, t2.Sub(t1))
		}
	}
	return median(ours), median(bare), nil
}

// startDevServer starts the pinned Temporal dev server on a free port, with
// eager activity execution and our search attributes.
// serve starts a dev server and a worker with every role over e's
// activities; stop ends both.
func (e *env) serve(ctx context.Context) (c client.Client, stop func(), err error) {
	dev, err := startDevServer(ctx, e.state)
	if err != nil {
		return nil, nil, err
	}
	c = dev.Client()
	e.acts.Temporal = c
	ws := roles.New(c, roles.All, e.acts)
	if err := roles.Start(ws); err != nil {
		dev.Stop()
		return nil, nil, err
	}
	return c, func() { roles.Stop(ws); dev.Stop() }, nil
}

func startDevServer(ctx context.Context, state string, extra ...string) (*testsuite.DevServer, error) {
	bin := os.Getenv("T1FLOW_TEMPORAL_BIN")
	if bin == "" {
		bin = filepath.Join(state, "bin", "temporal")
	}
	args := append([]string{"--dynamic-config-value", "system.enableActivityEagerExecution=true"}, extra...)
	for _, sa := range ids.SearchAttributeFlags {
		args = append(args, "--search-attribute", sa)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort())
	return testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: bin, ClientOptions: &client.Options{HostPort: addr}, LogLevel: "error", ExtraArgs: args,
	})
}

// benchTurnLoop is the median time per turn of the RolloutWorkflow turn
// loop over reps rollouts of `sleep 0.1` turns.
func benchTurnLoop(ctx context.Context, c client.Client, ref task.Ref, turns, reps int) (time.Duration, error) {
	cmds := make([]string, turns)
	for i := range cmds {
		cmds[i] = "sleep 0.1"
	}
	var loopPerTurn []time.Duration
	for rep := 0; rep < reps; rep++ {
		in := workflows.RolloutInput{CampaignID: "bench", Stage: "bench", Step: rep, Task: ref, Attempt: 1, TurnCap: turns + 1,
			Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: cmds}}
		wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: ids.ControlQueue}, workflows.RolloutWorkflow, in)
		if err != nil {
			return 0, err
		}
		var res workflows.RolloutResult
		if err := wr.Get(ctx, &res); err != nil {
			return 0, err
		}
		if res.Turns != turns {
			return 0, fmt.Errorf("turn loop ran %d of %d turns: %s", res.Turns, turns, res.Error)
		}
		// From the first turn's scheduling to the last turn's completion.
		first, last, err := turnSpan(ctx, c, wr)
		if err != nil {
			return 0, err
		}
		loopPerTurn = append(loopPerTurn, last.Sub(first)/time.Duration(turns))
	}
	return median(loopPerTurn), nil
}

// benchBareTurns is the baseline: the same turns as a bare docker exec loop
// in one container.
func benchBareTurns(img string, turns int) (time.Duration, error) {
	cid, err := exec.Command("docker", "run", "-d", "--network", "none", img, "sleep", "600").Output()
	if err != nil {
		return 0, err
	}
	id := strings.TrimSpace(string(cid))
	defer exec.Command("docker", "rm", "-f", id).Run()
	t0 := time.Now()
	for i := 0; i < turns; i++ {
		if o, err := exec.Command("docker", "exec", id, "bash", "-c", "sleep 0.1").CombinedOutput(); err != nil {
			return 0, fmt.Errorf("docker exec: %v %s", err, o)
		}
	}
	return time.Since(t0) / time.Duration(turns), nil
}

func writeSandboxTable(b *strings.Builder, sz sizes, lifeOurs, lifeBare, perTurnOurs, perTurnBare time.Duration) {
	lifeRatio := float64(lifeOurs) / float64(lifeBare)
	turnRatio := float64(perTurnOurs) / float64(perTurnBare)
	verdict := func(r, target float64) string {
		if r <= target {
			return "met"
		}
		return "**missed**"
	}
	fmt.Fprintf(b, "%s\n\nWritten by `make bench` (bench/main.go) on %s, %d CPUs, %s. Each figure is a median;\n", sandboxSection, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintf(b, "each ratio compares t1flow with bare Docker doing the same operations in the same run.\n\n")
	fmt.Fprintf(b, "| what | t1flow | bare Docker | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(b, "| sandbox create → exec → destroy (activities, Docker SDK) vs `docker run --rm` (n=%d) | %s | %s | %.2f× | ≤ 1.3× (%s) |\n", sz.lifecycleN, ms(lifeOurs), ms(lifeBare), lifeRatio, verdict(lifeRatio, 1.3))
	fmt.Fprintf(b, "| one turn of a 100 ms command: RolloutWorkflow turn loop on the dev server vs a bare `docker exec` loop (%d turns × %d rollouts) | %s | %s | %.2f× | ≤ 1.5× (%s) |\n", sz.turns, sz.loopReps, ms(perTurnOurs), ms(perTurnBare), turnRatio, verdict(turnRatio, 1.5))
}

func writeSandboxNotes(b *strings.Builder, perTurnOurs, perTurnBare time.Duration) {
	fmt.Fprintf(b, "\nPer-turn overhead of the loop over the command itself: %s (t1flow) vs %s (bare `docker exec`).\n", ms(perTurnOurs-100*time.Millisecond), ms(perTurnBare-100*time.Millisecond))
	fmt.Fprintf(b, "\nNotes: the dev server runs with eager activity execution; a turn costs one activity\n"+
		"task dispatch and one workflow task, plus one exec through the Docker SDK (no CLI process).\n"+
		"The lifecycle includes the idempotency check (inspect by name), the resource limits and\n"+
		"labels, and the image-cache lookup.\n")
}

// turnSpan is the time from the first AgentTurn's scheduling to the last one's completion.
func turnSpan(ctx context.Context, c client.Client, wr client.WorkflowRun) (time.Time, time.Time, error) {
	var first, last time.Time
	it := c.GetWorkflowHistory(ctx, wr.GetID(), wr.GetRunID(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	sched := map[int64]string{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return first, last, err
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			sched[ev.EventId] = a.ActivityType.Name
			if a.ActivityType.Name == "AgentTurn" && first.IsZero() {
				first = ev.EventTime.AsTime()
			}
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && sched[a.ScheduledEventId] == "AgentTurn" {
			last = ev.EventTime.AsTime()
		}
	}
	return first, last, nil
}

// readRecord loads a rollout's record from the store it names (file://).
func readRecord(ctx context.Context, res workflows.RolloutResult) (workflows.RolloutRecord, error) {
	var rec workflows.RolloutRecord
	if res.Record == nil {
		return rec, fmt.Errorf("rollout %s has no record", res.RolloutID)
	}
	u, err := url.Parse(res.Record.URI)
	if err != nil {
		return rec, err
	}
	b, err := os.ReadFile(u.Path)
	if err != nil {
		return rec, err
	}
	if err := store.Verify(*res.Record, b); err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}
