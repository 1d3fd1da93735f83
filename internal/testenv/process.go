package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/internal/ids"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// WorkerBinary builds t1flow's worker once per test process.
func WorkerBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "t1flow-worker-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "worker")
		cmd := exec.Command("go", "build", "-o", builtBin, "./worker")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build worker: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return builtBin
}

// WorkerProcess is the worker binary run as its own process, so a test can
// kill it with SIGKILL the way a crash or an OOM kill would.
type WorkerProcess struct {
	Args []string
	Env  []string // added to the test's environment
	Home string   // T1FLOW_HOME: GPU processes' pid files are under Home/gpu
	Log  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartWorkerProcess runs the worker until the test ends.
func StartWorkerProcess(tb testing.TB, w *WorkerProcess) *WorkerProcess {
	tb.Helper()
	bin := WorkerBinary(tb)
	w.Args = append([]string{bin}, w.Args...)
	if w.Log == "" {
		w.Log = filepath.Join(tb.TempDir(), "worker.log")
	}
	w.Start(tb)
	tb.Cleanup(func() {
		w.Stop()
		if tb.Failed() {
			if b, err := os.ReadFile(w.Log); err == nil {
				tb.Logf("worker log (last 4000 bytes):\n%s", tail(string(b), 4000))
			}
		}
	})
	return w
}

// WaitPollers waits until at least n workers poll the activity queue. A
// started worker process takes work only once it polls, seconds later on a
// loaded machine, so a test that needs its workers to share the work waits
// for all of them before starting it.
func WaitPollers(tb testing.TB, c client.Client, queue string, n int, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := c.DescribeTaskQueue(context.Background(), queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err == nil && len(resp.Pollers) >= n {
			return
		}
		if time.Now().After(deadline) {
			got := 0
			if resp != nil {
				got = len(resp.Pollers)
			}
			tb.Fatalf("%d workers poll %s after %s, want %d (err %v)", got, queue, within, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Start launches the worker (again, after Kill9).
func (w *WorkerProcess) Start(tb testing.TB) {
	tb.Helper()
	logf, err := os.OpenFile(w.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: start %v\n", time.Now().Format(time.RFC3339Nano), w.Args)
	cmd := exec.Command(w.Args[0], w.Args[1:]...)
	// The sealed verifier toolchain is shared with the test process's: a
	// worker with a fresh home would otherwise build its own.
	// So is Harbor's env (the terminus-2 harness reads its spec from it).
	env := append(os.Environ(), "T1FLOW_HOME="+w.Home, "T1FLOW_TOOLCHAIN_HOME="+StateDir())
	if os.Getenv("T1FLOW_HARBOR_PYTHON") == "" {
		env = append(env, "T1FLOW_HARBOR_PYTHON="+filepath.Join(StateDir(), "harborenv", "bin", "python"))
	}
	cmd.Env = append(env, w.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: KillGroup9 takes it, and no signal meant for
	// the test reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	w.mu.Lock()
	w.cmd = cmd
	w.mu.Unlock()
}

// Kill9 kills the worker process alone with SIGKILL: its trainer and
// inference server live on as orphans, as they would after a real crash.
func (w *WorkerProcess) Kill9(tb testing.TB) {
	tb.Helper()
	cmd := w.running(tb)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	cmd.Wait()
	w.logKill("killed with SIGKILL")
}

// running takes the worker's process out of w (it is about to die).
func (w *WorkerProcess) running(tb testing.TB) *exec.Cmd {
	tb.Helper()
	w.mu.Lock()
	cmd := w.cmd
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		tb.Fatal("worker is not running")
	}
	return cmd
}

// logKill notes a kill in the worker's log, where the test's reader looks.
func (w *WorkerProcess) logKill(what string) {
	f, _ := os.OpenFile(w.Log, os.O_APPEND|os.O_WRONLY, 0o644)
	fmt.Fprintf(f, "--- %s: %s\n", time.Now().Format(time.RFC3339Nano), what)
	f.Close()
}

// KillGroup9 is a machine crash: SIGKILL to the worker's process group and
// to its trainer's and inference server's (each runs in a group of its own),
// all at once, so nothing of the worker survives.
func (w *WorkerProcess) KillGroup9(tb testing.TB) {
	tb.Helper()
	cmd := w.running(tb)
	pids := w.GPUPIDs()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for _, pid := range pids {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	cmd.Wait()
	w.logKill(fmt.Sprintf("killed its process groups with SIGKILL (worker %d, GPU processes %v)", cmd.Process.Pid, pids))
}

// Stop ends the worker gracefully (it stops its GPU processes), then makes
// sure no GPU process of its home is left.
func (w *WorkerProcess) Stop() {
	w.mu.Lock()
	cmd := w.cmd
	w.cmd = nil
	w.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	for _, pid := range w.GPUPIDs() {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// GPUPIDs are the trainer's and inference server's process IDs from their pid files.
func (w *WorkerProcess) GPUPIDs() []int {
	files, _ := filepath.Glob(filepath.Join(w.Home, "gpu", "*.pid"))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			out = append(out, pid)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// RestartableServer is a dev server of a test's own, with its state in a
// database file, so the test can stop Temporal and start it again on the
// same address with every workflow intact.
type RestartableServer struct {
	Address string
	opts    testsuite.DevServerOptions
	dev     *testsuite.DevServer
}

// RestartableDevServer starts one for the test and a client for it.
func RestartableDevServer(tb testing.TB) (*RestartableServer, client.Client) {
	tb.Helper()
	bin := temporalBin(tb)
	var s *RestartableServer
	var addr string
	// FreePort's port is free when it answers, not when the server binds it:
	// a server started beside this one (the parallel chaos tests) can take it
	// for its UI or metrics first (seen: "frame header looked like an
	// HTTP/1.1 header"). The first start may move to another port; restarts
	// keep the address.
	for try := 1; ; try++ {
		addr = fmt.Sprintf("127.0.0.1:%d", FreePort())
		s = &RestartableServer{Address: addr, opts: devServerOptions(bin, addr)}
		s.opts.DBFilename = filepath.Join(tb.TempDir(), "temporal.db") // a failed try's process may still hold its own
		err := s.Start()
		if err == nil {
			break
		}
		if try == 3 {
			tb.Fatalf("start the Temporal dev server (%d tries): %v", try, err)
		}
		tb.Logf("start the Temporal dev server on %s: %v; trying another port", addr, err)
	}
	tb.Cleanup(s.Stop)
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: quietLogger{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return s, c
}

// Start starts the server (again).
func (s *RestartableServer) Start() error {
	dev, err := testsuite.StartDevServer(context.Background(), s.opts)
	if err != nil {
		return err
	}
	s.dev = dev
	return nil
}

// Stop stops the server; its database file stays.
func (s *RestartableServer) Stop() {
	if s.dev != nil {
		s.dev.Stop()
		s.dev = nil
	}
}

func devServerOptions(bin, addr string) testsuite.DevServerOptions {
	args := []string{"--dynamic-config-value", "system.enableActivityEagerExecution=true"}
	for _, sa := range ids.SearchAttributeFlags {
		args = append(args, "--search-attribute", sa)
	}
	return testsuite.DevServerOptions{
		ExistingPath:  bin,
		ClientOptions: &client.Options{HostPort: addr, Namespace: "default"},
		LogLevel:      "error",
		ExtraArgs:     args,
		Stdout:        os.Stderr, Stderr: os.Stderr,
	}
}
