// Package testenv starts the real parts integration tests need: the Temporal
// dev server (the pinned CLI from temporal-dev/, never downloaded) and a
// Docker daemon. `make test` sets T1FLOW_INTEGRATION=1, which turns a missing
// part into a failure; a plain `go test` skips integration tests instead.
package testenv

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/worker/roles"
)

// Required reports whether integration tests must run.
func Required() bool { return os.Getenv("T1FLOW_INTEGRATION") == "1" }

// RepoRoot is the module root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// StateDir is the repo's .t1flow (or $T1FLOW_HOME), where the pinned CLI and build locks live.
func StateDir() string {
	if h := os.Getenv("T1FLOW_HOME"); h != "" {
		return h
	}
	return filepath.Join(RepoRoot(), ".t1flow")
}

func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		tb.Fatal(msg)
	}
	tb.Skip(msg + " (set T1FLOW_INTEGRATION=1, as `make test` does, to make this a failure)")
}

// Server is a dev server shared by one test package.
type Server struct {
	Dev     *testsuite.DevServer
	Address string
}

var (
	srvOnce sync.Once
	srv     *Server
	srvErr  error
)

// FreePort returns a loopback port that was free a moment ago.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// DevServer starts (once per package) a dev server on loopback with t1flow's
// search attributes and eager activities, and returns a client for it.
func DevServer(tb testing.TB) (*Server, client.Client) {
	tb.Helper()
	bin := temporalBin(tb)
	srvOnce.Do(func() {
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort())
		var dev *testsuite.DevServer
		dev, srvErr = testsuite.StartDevServer(context.Background(), devServerOptions(bin, addr))
		srv = &Server{Dev: dev, Address: addr}
	})
	if srvErr != nil {
		tb.Fatalf("start the Temporal dev server: %v", srvErr)
	}
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: "default", Logger: quietLogger{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return srv, c
}

func temporalBin(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("T1FLOW_TEMPORAL_BIN")
	if bin == "" {
		bin = filepath.Join(StateDir(), "bin", "temporal")
	}
	if _, err := os.Stat(bin); err != nil {
		unavailable(tb, "Temporal CLI not found at %s: run temporal-dev/dev.sh install", bin)
	}
	return bin
}

// Stop ends the shared dev server; call it from TestMain.
func Stop() {
	if srv != nil && srv.Dev != nil {
		srv.Dev.Stop()
	}
}

// Docker returns a client for a daemon that answers, with the base image and
// the sealed verifier toolchain built.
func Docker(tb testing.TB) *sandbox.Docker {
	tb.Helper()
	d, err := sandbox.NewDocker(context.Background(), StateDir())
	if err != nil {
		unavailable(tb, "%v", err)
	}
	if _, err := d.EnsureBaseImage(context.Background()); err != nil {
		tb.Fatalf("sandbox base image: %v", err)
	}
	if _, err := d.EnsureToolchain(context.Background()); err != nil {
		tb.Fatalf("sealed verifier toolchain: %v", err)
	}
	return d
}

// Containers lists t1flow containers whose label key has value.
func Containers(tb testing.TB, label, value string) []string {
	tb.Helper()
	out, err := exec.Command("docker", "ps", "-a", "-q", "--filter", "label="+label+"="+value).Output()
	if err != nil {
		tb.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// Worker runs t1flow workers of a role in this process until the test ends.
func Worker(tb testing.TB, c client.Client, role string, acts *activities.Activities) {
	tb.Helper()
	ws := roles.New(c, role, acts)
	if err := roles.Start(ws); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { roles.Stop(ws) })
}

// HostName is a sandbox host name unique to this test process, so tests never
// pick up each other's host queues.
func HostName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, os.Getpid())
}

// S3Server is a versitygw S3-compatible server on loopback with a posix
// backend under a test directory.
type S3Server struct {
	Endpoint, Access, Secret, Root string
}

// S3 starts versitygw for the test (installed by `make test` into .t1flow/bin).
func S3(tb testing.TB) *S3Server {
	tb.Helper()
	bin := filepath.Join(StateDir(), "bin", "versitygw")
	if _, err := os.Stat(bin); err != nil {
		unavailable(tb, "versitygw not found at %s: run `make s3server`", bin)
	}
	root := tb.TempDir()
	s := &S3Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", FreePort()), Access: "t1flowtest", Secret: "t1flowtestsecret", Root: root}
	cmd := exec.Command(bin, "--access", s.Access, "--secret", s.Secret, "--port", strings.TrimPrefix(s.Endpoint, "http://"), "posix", root)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.Endpoint, "http://"))
		if err == nil {
			c.Close()
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("versitygw did not listen on %s", s.Endpoint)
	return nil
}

// GPUWorker starts the local default GPU processes (reference trainer and
// inference server, random init) and a worker for the GPU queue.
func GPUWorker(tb testing.TB, c client.Client, st store.Store, home string) *gpu.Local {
	tb.Helper()
	if err := exec.Command(gpu.Python(), "-c", "import torch").Run(); err != nil {
		unavailable(tb, "%s cannot import torch: apt-get install python3-torch libopenblas0-pthread", gpu.Python())
	}
	return GPUWorkerWith(tb, c, st, gpu.LocalOptions{Home: home, ServerArgs: []string{"--threads", "1"}})
}

// GPUWorkerWith starts a GPU worker's processes as o says (backend, model)
// and a worker for its trainer's queue.
func GPUWorkerWith(tb testing.TB, c client.Client, st store.Store, o gpu.LocalOptions) *gpu.Local {
	tb.Helper()
	o.Store = st
	l, err := gpu.StartLocal(context.Background(), o)
	if err != nil {
		for _, f := range []string{"trainer.log", "inference.log"} {
			b, _ := os.ReadFile(filepath.Join(o.Home, "logs", f))
			tb.Logf("%s:\n%s", f, b[max(0, len(b)-4000):])
		}
		tb.Fatal(err)
	}
	l.Acts.Name = "test" + ids.Clean(o.Home) // its own queue, apart from other tests' trainers
	ws := roles.NewGPU(c, l.Acts)
	if err := roles.Start(ws); err != nil {
		l.Stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { roles.Stop(ws); l.Stop() })
	return l
}

// HFPython is the hf backend's interpreter as `make hfenv` builds it, set as
// $T1FLOW_HF_PYTHON for the test; the test is skipped when there is none
// (`make test` builds it first, so there it always runs).
func HFPython(tb testing.TB) string {
	tb.Helper()
	py := os.Getenv("T1FLOW_HF_PYTHON")
	if py == "" {
		py = filepath.Join(StateDir(), "hfenv", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		tb.Skipf("no Hugging Face backend environment (%s is missing): `make hfenv` builds it, and `make test` does that first", py)
	}
	tb.Setenv("T1FLOW_HF_PYTHON", py)
	return py
}

// HFTinyModel builds a tiny random Hugging Face MoE checkpoint of arch
// (qwen3_moe, olmoe, mixtral) with gpu/hf/tiny.py and returns its directory.
// Checkpoints are kept in the state dir's cache, keyed by tiny.py's content
// and the pinned requirements, and never written to by the tests (the
// processes only read -model).
func HFTinyModel(tb testing.TB, arch string) string {
	tb.Helper()
	py := HFPython(tb)
	script := filepath.Join(gpu.HFDir(), "tiny.py")
	src, err := os.ReadFile(script)
	if err != nil {
		tb.Fatal(err)
	}
	reqs, _ := os.ReadFile(filepath.Join(gpu.HFDir(), "requirements.txt")) // the library versions that wrote it
	sum := sha256.Sum256(append(src, reqs...))
	dir := filepath.Join(StateDir(), "cache", "hf-tiny", fmt.Sprintf("%s-%x", arch, sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir
	}
	tmp := dir + fmt.Sprintf(".tmp%d", os.Getpid())
	os.RemoveAll(tmp)
	cmd := exec.Command(py, script, "--arch", arch, "--out", tmp)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("tiny.py --arch %s: %v\n%s", arch, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(dir, "config.json")); serr != nil {
			tb.Fatal(err) // not another test's build that won the race
		}
		os.RemoveAll(tmp)
	}
	return dir
}
