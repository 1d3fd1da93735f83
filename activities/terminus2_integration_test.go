package activities_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// TestTerminus2TerminalMatchesHarbor runs one keystroke script in a real
// sandbox twice: through Harbor's own TmuxSession (spec.py drive, over
// docker exec) and through t1flow's terminal, and requires the same
// observations; C-c must interrupt a running sleep 1000.
func TestTerminus2TerminalMatchesHarbor(t *testing.T) {
	if _, err := os.Stat(harbor.Python()); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") == "" {
			t.Skipf("no Harbor env at %s (make harborenv)", harbor.Python())
		}
		t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", harbor.Python())
	}
	d := testenv.Docker(t)
	// Generous: the task image build and Harbor's own drive share the cores
	// with the other packages under go test -p 4 (8 min ran out at load 20).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tk, err := task.Load("../examples/tasks/log-level-counter")
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(ctx, tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := sandbox.ContainerName(testenv.HostName("t2")+"."+tk.ID, 1)
	id, err := d.Start(ctx, name, img, sandbox.TaskLimits(tk.Config), sandbox.TaskEnv(tk.Config), map[string]string{sandbox.LabelRollout: "t2-" + tk.ID, sandbox.LabelCampaign: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), id) })

	k := func(keys string, d float64) harness.Keys { return harness.Keys{Keystrokes: keys, Duration: d} }
	steps := [][]harness.Keys{
		{k("echo hello-$((6*7))\n", 0.5)},
		{k("sleep 1000\n", 1)},
		{k("C-c", 0.5)},
		{k("echo after-$((1+1))\n", 0.5)},
		{k("echo C-c Escape literal\n", 0.5), k("", 0.2)},
		{k("cat\n", 0.3), k("typed into cat\n", 0.3), k("C-d", 0.3)},
		{k("seq 1 300\n", 1)},
	}
	req, _ := json.Marshal(map[string]any{"container": id, "steps": steps})
	raw, err := harbor.Run(ctx, "drive", req)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	// The same container again, fresh: Harbor's session and files gone.
	if res, err := d.Exec(ctx, id, "tmux kill-server; rm -f /tmp/.t1flow-harbor-drive.pane; clear >/dev/null; true", sandbox.ExecOptions{Timeout: 30 * time.Second}); err != nil {
		t.Fatal(err, res.Output)
	}
	spec, err := harbor.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d}
	var got []string
	for i := -1; i < len(steps); i++ {
		var cmds []harness.Keys
		if i >= 0 {
			cmds = steps[i]
		}
		obs, err := a.T2Step(ctx, spec, id, "", i < 0, cmds, time.Minute)
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		got = append(got, obs)
	}
	if len(got) != len(want) {
		t.Fatalf("%d observations, Harbor's %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("observation %d differs from Harbor's:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
	for i, sub := range map[int]string{1: "hello-42", 3: "^C", 4: "after-2", 5: "C-c Escape literal", 7: "300"} {
		if !strings.Contains(got[i], sub) {
			t.Errorf("observation %d lacks %q: %q", i, sub, got[i])
		}
	}
	if !strings.HasPrefix(got[0], spec.ScreenLabel) || !strings.HasPrefix(got[1], spec.NewOutputLabel) {
		t.Errorf("first observations %q, %q: want the screen, then new output", got[0], got[1])
	}

	// agent.user: the terminal (the login shell in its tmux session) runs
	// as that user, as Harbor's agent phase does; the image's user
	// (root here) is not who types.
	// A sandbox has one agent user: root's terminal and its capture file go.
	if res, err := d.Exec(ctx, id, "tmux kill-server; rm -f /tmp/.t1flow-terminus2.capture; useradd -m -u 1700 t2agent", sandbox.ExecOptions{Timeout: 30 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Fatal(err, res.Output)
	}
	if _, err := a.T2Step(ctx, spec, id, "t2agent", true, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	obs, err := a.T2Step(ctx, spec, id, "t2agent", false, []harness.Keys{k("echo who=$(id -un) uid=$(id -u) home=$HOME\n", 0.5)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(obs, "who=t2agent uid=1700 home=/home/t2agent") {
		t.Errorf("agent.user t2agent: the terminal's shell said %q", obs)
	}
}
