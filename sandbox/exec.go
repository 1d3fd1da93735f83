package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
)

// ExecOptions are the knobs of one command in a sandbox.
type ExecOptions struct {
	Timeout  time.Duration // killed (with its process group) after this
	User     string
	WorkDir  string
	Env      []string
	HeadCap  int
	TailCap  int
	Progress func() // called every few seconds while the command runs
	// Stdout, when set, receives the command's standard output, and Output
	// holds only its standard error.
	Stdout io.Writer
}

// ExecResult is what a command did.
type ExecResult struct {
	ExitCode int
	Output   string // stdout and stderr interleaved, capped
	Bytes    int64  // total output bytes
	Dropped  int64  // bytes left out of Output
	TimedOut bool
	Duration time.Duration
}

// ErrContainerGone means the sandbox no longer exists or no longer runs.
var ErrContainerGone = errors.New("sandbox container is gone")

// IsGone reports whether err means the container is gone, so that only a
// fresh sandbox can help (retrying on this one cannot).
func IsGone(err error) bool {
	return errors.Is(err, ErrContainerGone) || errdefs.IsNotFound(err)
}

// Exec runs script with bash -c in the container under coreutils timeout, so
// the whole process group dies at the deadline even if the client goes away.
func (d *Docker) Exec(ctx context.Context, id, script string, o ExecOptions) (ExecResult, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	secs := fmt.Sprintf("%.3f", o.Timeout.Seconds())
	return d.exec(ctx, id, []string{"timeout", "-k", "5", secs, "bash", "-c", script}, o)
}

// ExecRaw runs a short bash script directly (no timeout wrapper).
func (d *Docker) ExecRaw(ctx context.Context, id, script, user string) (ExecResult, error) {
	return d.exec(ctx, id, []string{"bash", "-c", script}, ExecOptions{User: user, Timeout: time.Minute})
}

// ExecArgv runs argv as it is: no bash and no timeout from the container, for
// the sealed verifier (the container's own timeout and bash are the agent's to
// replace). Only the Go-side backstop bounds it, at o.Timeout + 15 s.
func (d *Docker) ExecArgv(ctx context.Context, id string, argv []string, o ExecOptions) (ExecResult, error) {
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	return d.exec(ctx, id, argv, o)
}

func (d *Docker) exec(ctx context.Context, id string, cmd []string, o ExecOptions) (ExecResult, error) {
	if o.HeadCap == 0 && o.TailCap == 0 {
		o.HeadCap, o.TailCap = 8<<10, 8<<10
	}
	start := time.Now()
	resp, err := d.Client.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true, User: o.User, WorkingDir: o.WorkDir, Env: o.Env,
	})
	if err != nil {
		if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
			return ExecResult{}, fmt.Errorf("%w: %v", ErrContainerGone, err)
		}
		return ExecResult{}, err
	}
	hj, err := d.Client.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return ExecResult{}, err
	}
	defer hj.Close()
	buf := NewCappedBuffer(o.HeadCap, o.TailCap)
	var stdout io.Writer = buf
	if o.Stdout != nil {
		stdout = o.Stdout
	}
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, buf, hj.Reader)
		done <- err
	}()
	// The Go-side deadline is a backstop behind the in-container timeout.
	backstop := time.NewTimer(o.Timeout + 15*time.Second)
	defer backstop.Stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if o.Progress != nil {
				o.Progress()
			}
		case <-backstop.C:
			hj.Close()
			<-done
			return ExecResult{ExitCode: -1, Output: buf.String(), Bytes: buf.Total(), Dropped: buf.Dropped(), TimedOut: true, Duration: time.Since(start)}, nil
		case <-ctx.Done():
			hj.Close()
			<-done
			return ExecResult{}, ctx.Err()
		}
	}
	if err != nil {
		return ExecResult{}, fmt.Errorf("reading exec output: %w", err)
	}
	var code int
	for i := 0; ; i++ {
		ins, err := d.Client.ContainerExecInspect(ctx, resp.ID)
		if err != nil {
			return ExecResult{}, err
		}
		if !ins.Running || i > 100 {
			code = ins.ExitCode
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	dur := time.Since(start)
	return ExecResult{
		ExitCode: code, Output: buf.String(), Bytes: buf.Total(), Dropped: buf.Dropped(),
		TimedOut: (code == 124 || code == 137) && dur >= o.Timeout, Duration: dur,
	}, nil
}
