package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
)

// slowTask is log-level-counter with a build step of a minute (a nonce keeps
// its image tag unbuilt).
func slowTask(t *testing.T) *task.Task {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "slow")
	if err := os.CopyFS(dir, os.DirFS("../examples/tasks/log-level-counter")); err != nil {
		t.Fatal(err)
	}
	df := filepath.Join(dir, "environment", "Dockerfile")
	b, err := os.ReadFile(df)
	if err != nil {
		t.Fatal(err)
	}
	b = fmt.Appendf(b, "RUN echo %d && sleep 60\n", time.Now().UnixNano())
	if err := os.WriteFile(df, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func errType(err error) (string, bool) {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return "", false
	}
	return ae.Type(), !ae.NonRetryable()
}

// TestCancelledImageBuildIsRetryableNotTaskInvalid: an image build cut short
// by its caller (the activity cancelled, or a worker stopping past its stop
// timeout) is a retryable InfraError, not task_invalid; only the task's own
// build_timeout_sec makes it the task's fault.
func TestCancelledImageBuildIsRetryableNotTaskInvalid(t *testing.T) {
	d := testenv.Docker(t)
	if _, err := d.EnsureBaseImage(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(3*time.Second, cancel)
	start := time.Now()
	_, _, err := d.EnsureTaskImage(ctx, slowTask(t), nil)
	if typ, retryable := errType(err); typ != errs.Infra || !retryable || time.Since(start) > 30*time.Second {
		t.Fatalf("a build cancelled after 3 s: %v (type %q, retryable %v) after %s; want a retryable %s", err, typ, retryable, time.Since(start), errs.Infra)
	}

	tk := slowTask(t)
	tk.Config.BuildTimeoutSec = 3
	_, _, err = d.EnsureTaskImage(context.Background(), tk, nil)
	if typ, _ := errType(err); typ != errs.TaskInvalid {
		t.Fatalf("a build past the task's build_timeout_sec: %v (type %q); want %s", err, typ, errs.TaskInvalid)
	}
}
