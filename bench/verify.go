package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/steptime"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// verifySection is the heading benchVerify's figures go under; -only verify
// rewrites just that section of the output file.
const verifySection = "## Sealed verification"

// unsealedPrepare is verification's prepare step as it was before the sealed
// toolchain: the container's own bash, rm and mkdir.
const unsealedPrepare = `kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; ` +
	`rm -rf /tests ` + activities.VerifierDir + ` && mkdir -p ` + activities.VerifierDir + ` /tests`

// benchVerify measures, in one run: the time to build the toolchain once
// (in a scratch directory, downloads included), and the verification of the
// oracle's work with the sealed verifier (Verify: tamper check, sealed
// prepare, test.sh under the toolchain) against the unsealed path it replaced
// (the container's bash and python3), on the same sandboxes' twins.
func benchVerify(ctx context.Context, e *env, n int, only string) (string, error) {
	base, err := e.d.EnsureBaseImage(ctx)
	if err != nil {
		return "", err
	}
	scratch := filepath.Join(e.tmp, "toolchain-build")
	start := time.Now()
	tc, err := sandbox.EnsureToolchain(ctx, e.d.Client, base, scratch)
	if err != nil {
		return "", err
	}
	build := time.Since(start)
	os.RemoveAll(scratch)
	if _, err := e.d.EnsureToolchain(ctx); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n\nWritten by `make bench` or, alone, `go run ./bench -only verify` (bench/verify.go) on %s, %d CPUs. "+
		"Each figure is a median over the task's oracle sandboxes (n=%d per task and path); sealed = the Verify activity "+
		"(the agent's processes stopped, the tamper check, the tests staged, one exec that empties the verifier's places, moves the tests in "+
		"and runs test.sh under the read-only toolchain), unsealed = the path it replaced "+
		"(the container's bash, rm, timeout and python3), both reading results the same way.\n\n",
		verifySection, time.Now().Format("2006-01-02"), runtime.NumCPU(), n)
	fmt.Fprintf(&b, "Toolchain build, once per host: **%.1f s** (wheels downloaded from PyPI included), %d MB on disk.\n\n", build.Seconds(), tc.SizeBytes>>20)
	b.WriteString("| task | sealed | unsealed | ratio |\n|---|---|---|---|\n")
	var sealedAll, unsealedAll []verifySample
	load := loadAvg()
	for _, dir := range taskDirs("examples/tasks/*", only) {
		s, u, err := benchVerifyTask(ctx, e, dir, n, true)
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		sealedAll, unsealedAll = append(sealedAll, s...), append(unsealedAll, u...)
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f× |\n", filepath.Base(dir), ms(medianTotal(s)), ms(medianTotal(u)), ratio(s, u))
	}
	if len(sealedAll) > 0 {
		target := "met"
		if ratio(sealedAll, unsealedAll) > 1.2 {
			target = "NOT met"
		}
		fmt.Fprintf(&b, "| **all examples/tasks** | **%s** | **%s** | **%.2f×** (target ≤ 1.2×: %s) |\n\n", ms(medianTotal(sealedAll)), ms(medianTotal(unsealedAll)), ratio(sealedAll, unsealedAll), target)
		fmt.Fprintf(&b, "Machine load while the examples/tasks rows ran (1-minute load average): %s at the start, %s at the end.\n\n", load, loadAvg())
		writeVerifySteps(&b, sealedAll, unsealedAll)
	}
	b.WriteString("Terminal-Bench-format tasks (their test.sh installs curl, downloads uv, runs `uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest`): " +
		"sealed only, since unsealed they cannot run offline at all (`uvx: command not found`, a verifier_error).\n\n| task | sealed |\n|---|---|\n")
	for _, dir := range taskDirs("examples/tb2/*", only) {
		s, _, err := benchVerifyTask(ctx, e, dir, n, false)
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", filepath.Base(dir), ms(medianTotal(s)))
	}
	return b.String(), nil
}

// taskDirs are the task directories matching glob that only (-verify-tasks:
// comma-separated names, "" for all) allows.
func taskDirs(glob, only string) []string {
	dirs, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), glob))
	if only == "" {
		return dirs
	}
	var out []string
	for _, d := range dirs {
		for _, n := range strings.Split(only, ",") {
			if filepath.Base(d) == strings.TrimSpace(n) {
				out = append(out, d)
			}
		}
	}
	return out
}

// loadAvg is the 1-minute load average (Linux), or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func ratio(a, b []verifySample) float64 { return float64(medianTotal(a)) / float64(medianTotal(b)) }

func medianTotal(ss []verifySample) time.Duration {
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.total
	}
	return median(ds)
}

// stepMedian is the median time of one step over the samples that had it,
// and how many did.
func stepMedian(ss []verifySample, name string) (time.Duration, int) {
	var ds []time.Duration
	for _, s := range ss {
		var d time.Duration
		had := false
		for _, st := range s.steps {
			if st.Name == name {
				d, had = d+st.D, true
			}
		}
		if had {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	return median(ds), len(ds)
}

// writeVerifySteps writes the per-step breakdown of both paths: each step's
// median over every examples/tasks verification, and what is left outside
// the timed steps.
func writeVerifySteps(b *strings.Builder, sealed, unsealed []verifySample) {
	fmt.Fprintf(b, "Per step, median over all %d verifications of each path (a step's median; the rows need not add up to the totals' medians). "+
		"The first exec stops the agent's processes (unsealed it also empties /tests and /logs/verifier); sealed, the test.sh exec "+
		"first empties /tests, /logs/verifier and the scratch directory and moves the staged tests to /tests, with the toolchain's bash and coreutils.\n\n", len(sealed))
	b.WriteString("| step | sealed | unsealed | sealed − unsealed |\n|---|---|---|---|\n")
	cell := func(ss []verifySample, name string) (string, time.Duration) {
		d, had := stepMedian(ss, name)
		if had == 0 {
			return "—", 0
		}
		return ms(d), d
	}
	row := func(label, name string) {
		sc, sd := cell(sealed, name)
		uc, ud := cell(unsealed, name)
		fmt.Fprintf(b, "| %s | %s | %s | %+.1f ms |\n", label, sc, uc, float64((sd-ud).Microseconds())/1000)
	}
	for _, name := range activities.VerifySteps {
		row(name, name)
		if name == activities.StepTamperCheck {
			for _, sub := range []string{sandbox.ChangesFromHost, sandbox.ChangesFromSnapshot, sandbox.ChangesFromDaemon} {
				if _, had := stepMedian(sealed, sub); had > 0 {
					row(fmt.Sprintf("  of which %s (%d of %d)", sub, had, len(sealed)), sub)
				}
			}
		}
	}
	fmt.Fprintf(b, "| total | %s | %s | %+.1f ms |\n", ms(medianTotal(sealed)), ms(medianTotal(unsealed)), float64((medianTotal(sealed)-medianTotal(unsealed)).Microseconds())/1000)
	row("for reference, not in the path: docker diff of the same sandbox", stepDiffReference)
	b.WriteString("\n")
}

const stepDiffReference = "docker diff (reference)"

// verifySample is one timed verification: its total and its steps.
type verifySample struct {
	total time.Duration
	steps []steptime.Step
}

// benchVerifyTask runs the oracle in fresh sandboxes and times verification,
// sealed and (when unsealed) the old way, alternating so drift hits both.
func benchVerifyTask(ctx context.Context, e *env, dir string, n int, unsealed bool) (sealed, old []verifySample, err error) {
	tk, err := task.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	ref, err := task.Bundle(ctx, e.st, tk)
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i < n; i++ {
		for _, seal := range []bool{true, false} {
			if !seal && !unsealed {
				continue
			}
			s, err := verifyOnce(ctx, e, tk, ref, fmt.Sprintf("bench-verify-%d-%d-%v", os.Getpid(), i, seal), seal)
			if err != nil {
				return nil, nil, err
			}
			if seal {
				sealed = append(sealed, s)
			} else {
				old = append(old, s)
			}
		}
	}
	return sealed, old, nil
}

func verifyOnce(ctx context.Context, e *env, tk *task.Task, ref task.Ref, rollout string, sealed bool) (verifySample, error) {
	a := e.acts
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: rollout + "." + tk.ID, SandboxAttempt: 1})
	if err != nil {
		return verifySample{}, err
	}
	defer a.DestroySandbox(context.WithoutCancel(ctx), activities.DestroyInput{Sandbox: cs.Sandbox})
	if _, err := a.AgentTurn(ctx, activities.TurnInput{Sandbox: cs.Sandbox, Task: ref, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, TimeoutSec: 300}); err != nil {
		return verifySample{}, err
	}
	clock := &steptime.Clock{}
	tctx := steptime.With(ctx, clock)
	start := time.Now()
	var vr activities.VerifyResult
	if sealed {
		vr, err = a.Verify(tctx, activities.VerifyInput{Sandbox: cs.Sandbox, Task: ref, RolloutID: rollout, TimeoutSec: 120})
	} else {
		vr, err = verifyUnsealed(tctx, e, tk, cs.Sandbox.ContainerID)
	}
	took := time.Since(start)
	if err != nil {
		return verifySample{}, err
	}
	if sealed {
		// What docker diff of this sandbox costs, for reference: the tamper
		// check reads the upper directory instead where it can.
		t0 := time.Now()
		if _, err := e.d.Client.ContainerDiff(ctx, cs.Sandbox.ContainerID); err != nil {
			return verifySample{}, err
		}
		clock.Add(stepDiffReference, time.Since(t0))
	}
	if vr.Total == 0 || vr.Passed != vr.Total {
		return verifySample{}, fmt.Errorf("oracle not resolved (sealed %v): %d/%d", sealed, vr.Passed, vr.Total)
	}
	return verifySample{took, clock.Steps()}, nil
}

// verifyUnsealed is the verification the sealed one replaced, its steps
// timed under the same names as Verify's.
func verifyUnsealed(ctx context.Context, e *env, tk *task.Task, id string) (activities.VerifyResult, error) {
	end := steptime.Start(ctx, activities.StepKill)
	_, err := e.d.ExecRaw(ctx, id, unsealedPrepare, "root")
	end()
	if err != nil {
		return activities.VerifyResult{}, err
	}
	end = steptime.Start(ctx, activities.StepCopyTests)
	tests, err := task.TarBytes(tk.Dir, "tests", "tests/")
	if err != nil {
		return activities.VerifyResult{}, err
	}
	err = e.d.CopyIn(ctx, id, "/", tests)
	end()
	if err != nil {
		return activities.VerifyResult{}, err
	}
	end = steptime.Start(ctx, activities.StepTestSh)
	_, err = e.d.Exec(ctx, id, "bash /tests/test.sh", sandbox.ExecOptions{Timeout: 2 * time.Minute, User: "root"})
	end()
	if err != nil {
		return activities.VerifyResult{}, err
	}
	end = steptime.Start(ctx, activities.StepResults)
	defer end()
	files, err := e.d.CopyOutFiles(ctx, id, activities.VerifierDir, activities.MaxResultFileBytes, activities.MaxResultsBytes)
	if err != nil {
		return activities.VerifyResult{}, err
	}
	return activities.ParseResults(files)
}
