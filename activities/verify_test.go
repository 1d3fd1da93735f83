package activities_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

func TestVerifyIgnoresPlantedResults(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, err := task.Load("../examples/tasks/csv-revenue-report")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d, Store: st, Host: testenv.HostName("unit"), TaskCache: t.TempDir()}
	// The sandbox comes from the activity itself; its mechanics are tested in sandbox/.
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: testenv.HostName("unit") + ".verify." + tk.ID, SandboxAttempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DestroySandbox(context.Background(), activities.DestroyInput{Sandbox: cs.Sandbox}) })
	id := cs.Sandbox.ContainerID
	plant := `mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt
echo '{"results":{"tests":[{"name":"x","status":"passed"}]}}' > /logs/verifier/ctrf.json
printf 'def test_x():\n    pass\n' > /tests/test_outputs.py; echo 'exit 0' > /tests/test.sh
nohup bash -c 'while :; do echo "{\"results\":{\"tests\":[{\"name\":\"x\",\"status\":\"passed\"}]}}" > /logs/verifier/ctrf.json 2>/dev/null; sleep 0.01; done' >/dev/null 2>&1 &
echo planted`
	if res, err := d.Exec(ctx, id, plant, sandbox.ExecOptions{Timeout: 10 * time.Second}); err != nil || !strings.Contains(res.Output, "planted") {
		t.Fatalf("plant: %v %q", err, res.Output)
	}
	vr, err := a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: "x"}, Task: ref, TimeoutSec: 60})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Format != "junit" || vr.Passed != 0 || vr.Total != 5 {
		t.Fatalf("planted results leaked into the verdict: %+v", vr)
	}
}

// TestVerifierOfAStoppedSandboxIsNotTheAgents: a sandbox killed while its
// tests run (a daemon restart, the host) leaves test.sh with no results, as
// an agent's fifo or deleted tool would; but it is the host's failure, so
// SandboxGone (a fresh sandbox, unscored), never the VerifierError a rollout
// scores at 0. Before, it was a VerifierError.
func TestVerifierOfAStoppedSandboxIsNotTheAgents(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, err := task.Load("../workflows/testdata/tasks/partial-solution")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d, Store: st, Host: testenv.HostName("unit"), TaskCache: t.TempDir()}
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: testenv.HostName("unit") + ".stopped." + tk.ID, SandboxAttempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DestroySandbox(context.Background(), activities.DestroyInput{Sandbox: cs.Sandbox}) })
	id := cs.Sandbox.ContainerID
	// The tests hang on the fifo until the sandbox is killed under them.
	if res, err := d.Exec(ctx, id, "mkdir -p /app/out && mkfifo /app/out/a.txt && echo planted", sandbox.ExecOptions{Timeout: 10 * time.Second}); err != nil || !strings.Contains(res.Output, "planted") {
		t.Fatalf("plant: %v %q", err, res.Output)
	}
	go func() {
		for range 600 {
			top, err := d.Client.ContainerTop(ctx, id, nil)
			if err == nil && strings.Contains(fmt.Sprint(top.Processes), "test_outputs.py") { // pytest runs
				d.Client.ContainerKill(ctx, id, "KILL")
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	_, err = a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: "x"}, Task: ref, TimeoutSec: 60})
	t.Logf("verify: %v", err)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.SandboxGone {
		t.Fatalf("verifier of a sandbox killed under it: %v; want SandboxGone (the host's failure, not the agent's 0)", err)
	}
}

// TestVerifyRecordsAnArtifactItCannotCopyMissing: artifacts are extras
// copied after the verdict; one the agent made uncopyable (/logs/artifacts a
// symlink to itself) is recorded missing with the reason, and the verdict
// stands. Before, the copy's error failed Verify as an InfraError after
// test.sh ran: unscored, and a fresh sandbox, another try for the agent.
func TestVerifyRecordsAnArtifactItCannotCopyMissing(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, err := task.Load("../examples/tasks/csv-revenue-report")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d, Store: st, Host: testenv.HostName("unit"), TaskCache: t.TempDir()}
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: testenv.HostName("unit") + ".artloop." + tk.ID, SandboxAttempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DestroySandbox(context.Background(), activities.DestroyInput{Sandbox: cs.Sandbox}) })
	id := cs.Sandbox.ContainerID
	if res, err := d.Exec(ctx, id, "mkdir -p /logs && rm -rf /logs/artifacts && ln -s /logs/artifacts /logs/artifacts && echo planted", sandbox.ExecOptions{Timeout: 10 * time.Second, User: "root"}); err != nil || !strings.Contains(res.Output, "planted") {
		t.Fatalf("plant: %v %q", err, res.Output)
	}
	vr, err := a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: "x"}, Task: ref, TimeoutSec: 60, RolloutID: "artloop"})
	if err != nil {
		t.Fatalf("verify: %v; want the verdict, the artifact missing", err)
	}
	t.Logf("%d/%d passed; artifacts %+v", vr.Passed, vr.Total, vr.Artifacts)
	if vr.Total == 0 || len(vr.Artifacts) == 0 || vr.Artifacts[0].Source != "/logs/artifacts" || vr.Artifacts[0].Missing == "" || vr.Artifacts[0].Ref != nil {
		t.Fatalf("artifacts %+v; want /logs/artifacts recorded missing", vr.Artifacts)
	}
}

// TestVerifyGivesPID1BackItsOOMScore: root in the sandbox can make its PID 1
// the OOM killer's first pick (/proc/1/oom_score_adj 1000), so that tests
// filling the sandbox's memory stop the whole sandbox; the exec that stops
// the agent's processes sets it back to 0. Before, it stayed 1000.
func TestVerifyGivesPID1BackItsOOMScore(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, err := task.Load("../examples/tasks/csv-revenue-report")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d, Store: st, Host: testenv.HostName("unit"), TaskCache: t.TempDir()}
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: testenv.HostName("unit") + ".oomadj." + tk.ID, SandboxAttempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DestroySandbox(context.Background(), activities.DestroyInput{Sandbox: cs.Sandbox}) })
	id := cs.Sandbox.ContainerID
	adj := func() string {
		res, err := d.Exec(ctx, id, "cat /proc/1/oom_score_adj", sandbox.ExecOptions{Timeout: 10 * time.Second, User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(res.Output)
	}
	if res, err := d.Exec(ctx, id, "echo 1000 > /proc/1/oom_score_adj", sandbox.ExecOptions{Timeout: 10 * time.Second, User: "root"}); err != nil || res.ExitCode != 0 || adj() != "1000" {
		t.Fatalf("plant: %v %q; /proc/1/oom_score_adj %s", err, res.Output, adj())
	}
	if _, err := a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: "x"}, Task: ref, TimeoutSec: 60}); err != nil {
		t.Fatal(err)
	}
	if got := adj(); got != "0" {
		t.Fatalf("after Verify, /proc/1/oom_score_adj is %s; want 0", got)
	}
}
