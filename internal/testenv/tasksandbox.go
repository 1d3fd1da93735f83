package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/sandbox"
)

// TaskSandbox is a task loaded from dir, bundled into a fresh local store,
// and one sandbox of it started as a rollout's is (Docker.Start: the real
// keepalive, capabilities, limits and toolchain), removed when the test ends.
type TaskSandbox struct {
	Task  *task.Task
	Ref   task.Ref
	Store store.Store
	ID    string // the container's
	Name  string
}

// StartTaskSandbox makes a TaskSandbox on d; prefix names its host (HostName).
func StartTaskSandbox(t *testing.T, d *sandbox.Docker, dir, prefix string) TaskSandbox {
	t.Helper()
	ctx := context.Background()
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(ctx, tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	rollout := HostName(prefix) + "." + strings.ReplaceAll(t.Name(), "/", ".")
	name := sandbox.ContainerName(rollout, 1)
	id, err := d.Start(ctx, name, img, sandbox.TaskLimits(tk.Config), sandbox.TaskEnv(tk.Config),
		map[string]string{sandbox.LabelRollout: rollout, sandbox.LabelCampaign: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), id) })
	return TaskSandbox{Task: tk, Ref: ref, Store: st, ID: id, Name: name}
}
