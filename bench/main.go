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
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/roles"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

func main() {
	out := flag.String("out", "docs/bench.md", "where to write the results")
	n := flag.Int("n", 15, "lifecycle repetitions")
	turns := flag.Int("turns", 30, "turns per rollout in the turn-loop benchmark")
	flag.Parse()
	if err := run(*out, *n, *turns); err != nil {
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

func run(out string, n, turns int) error {
	ctx := context.Background()
	state := testenv.StateDir()
	d, err := sandbox.NewDocker(ctx, state)
	if err != nil {
		return err
	}
	if _, err := d.EnsureBaseImage(ctx); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "t1flow-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	st, err := store.NewLocal(filepath.Join(tmp, "store"))
	if err != nil {
		return err
	}
	tk, err := task.Load(filepath.Join(testenv.RepoRoot(), "examples/tasks/log-level-counter"))
	if err != nil {
		return err
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		return err
	}
	img, _, err := d.EnsureTaskImage(ctx, tk, nil)
	if err != nil {
		return err
	}
	host := fmt.Sprintf("bench-%d", os.Getpid())
	acts := &activities.Activities{Docker: d, Store: st, Host: host, TaskCache: filepath.Join(tmp, "cache"), EpisodeDir: filepath.Join(tmp, "episodes")}

	// 1. Lifecycle: create → exec → destroy, interleaved with the baseline so
	// both see the same machine load.
	var ours, bare []time.Duration
	for i := 0; i < n+1; i++ {
		t0 := time.Now()
		cs, err := acts.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: fmt.Sprintf("bench.%d", i), SandboxAttempt: 1})
		if err != nil {
			return err
		}
		if _, err := acts.AgentTurn(ctx, activities.TurnInput{Sandbox: cs.Sandbox, Task: ref, Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"true"}}, TimeoutSec: 30}); err != nil {
			return err
		}
		if err := acts.DestroySandbox(ctx, activities.DestroyInput{Sandbox: cs.Sandbox}); err != nil {
			return err
		}
		t1 := time.Now()
		if o, err := exec.Command("docker", "run", "--rm", "--network", "none", img, "true").CombinedOutput(); err != nil {
			return fmt.Errorf("docker run: %v %s", err, o)
		}
		t2 := time.Now()
		if i > 0 { // the first round warms caches
			ours, bare = append(ours, t1.Sub(t0)), append(bare, t2.Sub(t1))
		}
	}
	lifeOurs, lifeBare := median(ours), median(bare)

	// 2. Per-turn overhead of the workflow turn loop, on the real dev server.
	bin := os.Getenv("T1FLOW_TEMPORAL_BIN")
	if bin == "" {
		bin = filepath.Join(state, "bin", "temporal")
	}
	args := []string{"--dynamic-config-value", "system.enableActivityEagerExecution=true"}
	for _, sa := range ids.SearchAttributeFlags {
		args = append(args, "--search-attribute", sa)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort())
	dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: bin, ClientOptions: &client.Options{HostPort: addr}, LogLevel: "error", ExtraArgs: args,
	})
	if err != nil {
		return err
	}
	defer dev.Stop()
	c := dev.Client()
	acts.Temporal = c
	ws := roles.New(c, roles.All, acts)
	if err := roles.Start(ws); err != nil {
		return err
	}
	defer roles.Stop(ws)

	cmds := make([]string, turns)
	for i := range cmds {
		cmds[i] = "sleep 0.1"
	}
	var loopPerTurn []time.Duration
	for rep := 0; rep < 3; rep++ {
		in := workflows.RolloutInput{CampaignID: "bench", Stage: "bench", Step: rep, Task: ref, Attempt: 1, TurnCap: turns + 1,
			Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: cmds}}
		wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: ids.ControlQueue}, workflows.RolloutWorkflow, in)
		if err != nil {
			return err
		}
		var res workflows.RolloutResult
		if err := wr.Get(ctx, &res); err != nil {
			return err
		}
		if res.Turns != turns {
			return fmt.Errorf("turn loop ran %d of %d turns: %s", res.Turns, turns, res.Error)
		}
		// From the first turn's scheduling to the last turn's completion.
		first, last, err := turnSpan(ctx, c, wr)
		if err != nil {
			return err
		}
		loopPerTurn = append(loopPerTurn, last.Sub(first)/time.Duration(turns))
	}
	perTurnOurs := median(loopPerTurn)

	harness, err := benchHarness(ctx, c, ref, tmp)
	if err != nil {
		return err
	}
	rst, err := benchRST(ctx, c, st)
	if err != nil {
		return err
	}
	camp, err := benchCampaign(ctx, c, st, filepath.Join(tmp, "campaign"), ref)
	if err != nil {
		return err
	}

	// Baseline: the same turns as a bare docker exec loop in one container.
	cid, err := exec.Command("docker", "run", "-d", "--network", "none", img, "sleep", "600").Output()
	if err != nil {
		return err
	}
	id := strings.TrimSpace(string(cid))
	defer exec.Command("docker", "rm", "-f", id).Run()
	t0 := time.Now()
	for i := 0; i < turns; i++ {
		if o, err := exec.Command("docker", "exec", id, "bash", "-c", "sleep 0.1").CombinedOutput(); err != nil {
			return fmt.Errorf("docker exec: %v %s", err, o)
		}
	}
	perTurnBare := time.Since(t0) / time.Duration(turns)

	lifeRatio := float64(lifeOurs) / float64(lifeBare)
	turnRatio := float64(perTurnOurs) / float64(perTurnBare)
	verdict := func(r, target float64) string {
		if r <= target {
			return "met"
		}
		return "**missed**"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\n## Sandboxes and the turn loop\n\nWritten by `make bench` (bench/main.go) on %s, %d CPUs, %s. Each figure is a median;\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintf(&b, "each ratio compares t1flow with bare Docker doing the same operations in the same run.\n\n")
	fmt.Fprintf(&b, "| what | t1flow | bare Docker | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| sandbox create → exec → destroy (activities, Docker SDK) vs `docker run --rm` (n=%d) | %s | %s | %.2f× | ≤ 1.3× (%s) |\n", n, ms(lifeOurs), ms(lifeBare), lifeRatio, verdict(lifeRatio, 1.3))
	fmt.Fprintf(&b, "| one turn of a 100 ms command: RolloutWorkflow turn loop on the dev server vs a bare `docker exec` loop (%d turns × 3 rollouts) | %s | %s | %.2f× | ≤ 1.5× (%s) |\n", turns, ms(perTurnOurs), ms(perTurnBare), turnRatio, verdict(turnRatio, 1.5))
	traj, err := benchTrajectory(tmp)
	if err != nil {
		return err
	}
	b.WriteString(traj)
	fmt.Fprintf(&b, "\nPer-turn overhead of the loop over the command itself: %s (t1flow) vs %s (bare `docker exec`).\n", ms(perTurnOurs-100*time.Millisecond), ms(perTurnBare-100*time.Millisecond))
	fmt.Fprintf(&b, "\nNotes: the dev server runs with eager activity execution; a turn costs one activity\n"+
		"task dispatch and one workflow task, plus one exec through the Docker SDK (no CLI process).\n"+
		"The lifecycle includes the idempotency check (inspect by name), the resource limits and\n"+
		"labels, and the image-cache lookup.\n")
	b.WriteString(harness)
	b.WriteString(rst)
	b.WriteString(camp)

	// The GPU side: the reference trainer and inference server, measured by
	// their own benchmark in the same run.
	py, err := exec.Command(gpu.Python(), filepath.Join(gpu.ReferenceDir(), "bench.py")).Output()
	if err != nil {
		return fmt.Errorf("gpu/reference/bench.py: %v", err)
	}
	b.WriteString("\n")
	b.Write(py)
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	return nil
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
