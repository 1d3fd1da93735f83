package activities_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
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
