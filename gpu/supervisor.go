package gpu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// Python is the interpreter for the reference processes: $T1FLOW_PYTHON, else
// Debian's /usr/bin/python3 (where python3-torch installs), else python3.
func Python() string {
	if p := os.Getenv("T1FLOW_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// ReferenceDir is gpu/reference in this source tree ($T1FLOW_REFERENCE overrides).
func ReferenceDir() string {
	if d := os.Getenv("T1FLOW_REFERENCE"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "reference")
}

// Supervisor keeps one GPU process alive: it starts it with its devices
// assigned, waits for health, restarts it after a crash (the trainer reloads
// its last committed state by itself), keeps its log, and stops it on Stop.
type Supervisor struct {
	Name    string   // for logs: "trainer", "inference"
	Command []string // program and arguments; "{port}" is replaced by the port
	Env     []string // extra environment, e.g. CUDA_VISIBLE_DEVICES=0
	LogPath string
	Port    int // 0: pick a free loopback port once, reused across restarts
	// Health reports whether the process answers; nil probes GET /health.
	Health        func(ctx context.Context, baseURL string) error
	HealthTimeout time.Duration
	// PIDFile records the process, so a supervisor started after its worker
	// was killed (-9 leaves the process group running) stops the orphan first:
	// two trainers must never share one state directory.
	PIDFile string
	// PortFile, when set and Port is 0, keeps the port across restarts of the
	// worker, so the process's URL stays the same for work already in flight.
	PortFile string
	// Watchdog, when set, restarts a process that is up but no longer
	// answers (watchdog.go).
	Watchdog *Watchdog

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopping bool
	restarts int
	lastErr  error
}

// URL is the process's base URL.
func (s *Supervisor) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

// Restarts counts restarts after crashes.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// PID of the running process, 0 when none.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start launches the process and waits until it is healthy; a monitor then
// restarts it whenever it dies until Stop.
func (s *Supervisor) Start(ctx context.Context) error {
	if s.Port == 0 && s.PortFile != "" {
		// An orphan of a crashed supervisor may still hold the port.
		s.stopOrphan()
		s.Port = stablePort(s.PortFile)
	}
	if s.Port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.Port = p
	}
	if s.HealthTimeout == 0 {
		s.HealthTimeout = 2 * time.Minute
	}
	if err := s.launch(); err != nil {
		return err
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop()
		return err
	}
	go s.monitor()
	if s.Watchdog != nil {
		go s.watch()
	}
	return nil
}

func (s *Supervisor) args() []string {
	out := make([]string, len(s.Command))
	for i, a := range s.Command {
		if a == "{port}" {
			a = fmt.Sprint(s.Port)
		}
		out[i] = a
	}
	return out
}

// stopOrphan kills a process left by an earlier supervisor of the same
// PIDFile, if it is still the same program.
func (s *Supervisor) stopOrphan() {
	if s.PIDFile == "" {
		return
	}
	b, err := os.ReadFile(s.PIDFile)
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		return
	}
	// Only if that PID still runs our program (the script, for python ones):
	// a recycled PID belongs to someone else.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), s.program()) {
		return
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// program names what the process runs: its script (python x.py), its
// module (python -m vllm.entrypoints...), else its binary.
func (s *Supervisor) program() string {
	args := s.args()
	i := min(1, len(args)-1)
	if args[i] == "-m" && i+1 < len(args) {
		i++
	}
	return filepath.Base(args[i])
}

func (s *Supervisor) launch() error {
	if err := os.MkdirAll(filepath.Dir(s.LogPath), 0o755); err != nil {
		return err
	}
	s.stopOrphan()
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	args := s.args()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a stop reaches its children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(logf, "--- %s: starting %v %v\n", time.Now().Format(time.RFC3339), s.Env, args)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start %s: %w", s.Name, args[0], err)
	}
	if s.PIDFile != "" {
		os.MkdirAll(filepath.Dir(s.PIDFile), 0o755)
		os.WriteFile(s.PIDFile, []byte(fmt.Sprint(cmd.Process.Pid)), 0o644)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

func (s *Supervisor) probe(ctx context.Context) error {
	if s.Health != nil {
		return s.Health(ctx, s.URL())
	}
	return httpjson.Call(ctx, http.DefaultClient, "GET", s.URL()+"/health", s.Name+" /health", "", nil, nil)
}

func (s *Supervisor) waitHealthy(ctx context.Context) error {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	probe := func(c context.Context) error {
		select {
		case <-exited:
			return errors.New("exited")
		default:
		}
		return s.probe(c)
	}
	err := WaitHealthy(ctx, probe, s.HealthTimeout)
	if err != nil {
		return fmt.Errorf("%s did not become healthy (log %s): %w", s.Name, s.LogPath, err)
	}
	return nil
}

func (s *Supervisor) monitor() {
	backoff := time.Second
	for {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		<-exited
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.restarts++
		s.mu.Unlock()
		time.Sleep(backoff)
		if err := s.launch(); err != nil {
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		if err := s.waitHealthy(context.Background()); err == nil {
			backoff = time.Second
		}
	}
}

// Kill sends SIGKILL to the process (tests and operators simulating a crash);
// the monitor restarts it.
func (s *Supervisor) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// WaitRestarted waits until the process has been restarted at least n times and answers.
func (s *Supervisor) WaitRestarted(ctx context.Context, n int, timeout time.Duration) error {
	return WaitHealthy(ctx, func(c context.Context) error {
		if s.Restarts() < n {
			return fmt.Errorf("%d restarts so far", s.Restarts())
		}
		return s.probe(c)
	}, timeout)
}

// Stop ends the process: SIGTERM, then SIGKILL after a grace period.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopping = true
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// stablePort returns the port recorded in file when it is free now, or a new
// free port (recorded for next time); 0 lets the supervisor choose.
func stablePort(file string) int {
	if b, err := os.ReadFile(file); err == nil {
		var p int
		if _, err := fmt.Sscan(string(b), &p); err == nil && p > 0 {
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				l.Close()
				return p
			}
		}
	}
	p, err := freePort()
	if err != nil {
		return 0
	}
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte(fmt.Sprint(p)), 0o644)
	return p
}
