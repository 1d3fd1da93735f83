// Command worker runs t1flow's Temporal workers for its roles: control
// (workflows and light activities), sandbox (Docker sandboxes on this host),
// gpu (the trainer and inference processes, supervised), or all. It stops
// when its context ends (SIGINT, SIGTERM), and stops its processes with it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// registerPackageFlags: flags that set other packages' settings.
func registerPackageFlags() {
	flag.DurationVar(&workflows.HostWait, "host-wait", workflows.HostWait, "control: how long a rollout waits for the sandbox host that owns its container (a worker restart fits in it); past it the host is gone and the rollout starts over in a fresh sandbox on any host")
	flag.DurationVar(&roles.StopTimeout, "stop-timeout", roles.DefaultStopTimeout,
		"on SIGTERM, how long running activities (trainer operations, image builds) may take to finish before they are cancelled and handed back retryable; a second signal stops at once")
}

func run() error {
	hostname, _ := os.Hostname()
	role := flag.String("role", "all", "control, sandbox, gpu, all, or a comma-separated list")
	host := flag.String("host", hostname, "name of this sandbox host (its task queue is t1flow-sandbox-<host>)")
	storeDir := flag.String("store", config.StoreDir(), "artifact store directory (env T1FLOW_STORE)")
	aliases := flag.String("image-aliases", os.Getenv("T1FLOW_IMAGE_ALIASES"), "TOML file of FROM image aliases ([aliases] \"pattern\" = \"image\")")
	prepare := flag.Bool("prepare", false, "build the sandbox base image and the sealed verifier toolchain before serving (they are otherwise built on first use)")
	prepareOnly := flag.Bool("prepare-only", false, "build the sandbox base image and the sealed verifier toolchain, and exit")
	reaperTTL := flag.Duration("reaper-ttl", workflows.DefaultReaperTTLSec*time.Second, "remove t1flow containers older than this even if their rollout still runs")
	reaperRetire := flag.Duration("reaper-retire-after", workflows.DefaultReaperRetireAfterSec*time.Second, "a sandbox host with no worker and no completed reap for this long has its reaper schedule deleted (a new schedule only; 0: never)")
	reaperEvery := flag.Duration("reaper-interval", workflows.DefaultReaperIntervalSecs*time.Second, "how often the reaper schedule runs")
	maxSandboxes := flag.Int("max-sandboxes", activities.DefaultMaxSandboxes(), "live sandboxes this host admits at once (0: no limit); creations past it wait, then retry elsewhere")
	admissionWait := flag.Duration("admission-wait", activities.DefaultAdmissionWait, "how long a sandbox creation waits for room on a full host before it fails HostFull (retried, maybe on another host)")
	backend := flag.String("sandbox-backend", "docker", "docker, or sleep: sandbox activities only sleep -sleep-for and return synthetic results (load tests of orchestration only; needs "+activities.LoadTestEnv+"=1)")
	sleepFor := flag.Duration("sleep-for", 50*time.Millisecond, "with -sandbox-backend sleep: how long each sandbox activity sleeps")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	registerPackageFlags()
	var g gpuFlags
	g.register()
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %v", *logLevel, err)
	}
	set, err := roles.Parse(*role)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, err := config.OpenStore(*storeDir)
	if err != nil {
		return err
	}
	acts := &activities.Activities{Store: st, Host: ids.Clean(*host),
		TaskCache: filepath.Join(config.Home(), "cache", "tasks"), EpisodeDir: filepath.Join(config.Home(), "episodes"),
		MaxSandboxes: *maxSandboxes, AdmissionWait: *admissionWait, InferenceEngine: g.engine, ModelFiles: g.modelFiles}
	sleep, err := activities.CheckSleepBackend(*backend)
	if err != nil {
		return err
	}
	if sleep {
		if *sleepFor <= 0 || *prepare || *prepareOnly {
			return fmt.Errorf("-sandbox-backend sleep: -sleep-for %s must be > 0, and -prepare does not apply", *sleepFor)
		}
		fmt.Fprintf(os.Stderr, "worker: SLEEP SANDBOX BACKEND (load test): no sandbox runs, every rollout is synthetic\n")
		acts.Sleep = *sleepFor
	} else if set[roles.Sandbox] || *prepareOnly {
		d, err := openSandboxes(ctx, *aliases, *prepare || *prepareOnly)
		if err != nil || *prepareOnly {
			return err
		}
		acts.Docker = d
	}
	warnNoHarborEnv(!sleep && (set[roles.Sandbox] || set[roles.GPU]))

	tracing, flush, err := config.Tracing(ctx, "worker")
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer flush(context.Background())
	conn, err := config.LoadTemporal()
	if err != nil {
		return err
	}
	c, err := conn.Dial(ctx, level, tracing)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(os.Stderr, "worker: temporal", conn)
	acts.Temporal = c
	acts.Deployment = conn.Options.HostPort + "/" + conn.Options.Namespace

	if set[roles.Sandbox] {
		if err := ensureReaperSchedule(ctx, c, acts.Host, *reaperEvery, *reaperTTL, *reaperRetire); err != nil {
			return err
		}
	}
	workers := roles.New(c, *role, acts)
	if set[roles.GPU] {
		ws, stopGPU, err := g.start(ctx, c, st, *host, acts)
		if err != nil {
			return err
		}
		defer stopGPU()
		workers = append(workers, ws...)
	}
	if err := roles.Start(workers); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "worker: role %s, host %s, store %s; Ctrl-C to stop\n", *role, acts.Host, *storeDir)
	<-ctx.Done()
	stop() // a second signal ends the process at once
	fmt.Fprintf(os.Stderr, "worker: stopping; running activities have %s to finish\n", roles.StopTimeout)
	roles.Stop(workers)
	return nil
}

// warnNoHarborEnv: Terminus-2, the campaigns' and eval sweeps' default
// harness, reads Harbor's prompt from Harbor's env in the sandbox role's
// turns and the gpu role's SFT. Without it every such rollout and SFT on
// this host ends in an InfraError, so say so at start (when needed: a role
// that runs either).
func warnNoHarborEnv(needed bool) {
	if !needed {
		return
	}
	if err := harbor.Installed(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: WARNING: terminus-2 rollouts and SFT on this host will fail: %v\n", err)
	}
}

// openSandboxes connects to Docker and, with prepare, builds the sandbox base
// image and the sealed verifier toolchain up front (else on first use).
func openSandboxes(ctx context.Context, aliases string, prepare bool) (*sandbox.Docker, error) {
	d, err := sandbox.NewDocker(ctx, config.Home())
	if err != nil {
		return nil, err
	}
	d.Log = os.Stderr
	if aliases != "" {
		if err := d.LoadAliases(aliases); err != nil {
			return nil, err
		}
	}
	if !prepare {
		return d, nil
	}
	tag, err := d.EnsureBaseImage(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "worker: sandbox base image", tag)
	tc, err := d.EnsureToolchain(ctx)
	if err != nil {
		return nil, fmt.Errorf("sealed verifier toolchain: %w", err)
	}
	if tc.Built {
		fmt.Fprintf(os.Stderr, "worker: sealed verifier toolchain %s built in %s, %d MB\n", tc.Hash, tc.BuildTime.Round(time.Millisecond), tc.SizeBytes>>20)
	} else {
		fmt.Fprintf(os.Stderr, "worker: sealed verifier toolchain %s at %s\n", tc.Hash, tc.Dir)
	}
	return d, nil
}

// ensureReaperSchedule creates this host's reaper schedule once.
func ensureReaperSchedule(ctx context.Context, c client.Client, host string, every, ttl, retire time.Duration) error {
	retireSec := retire.Seconds()
	if retire <= 0 {
		retireSec = -1 // never
	}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      ids.ReaperScheduleID(host),
		Spec:    client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}},
		Overlap: 0, // skip a run while the previous one is still going
		Action: &client.ScheduleWorkflowAction{
			ID:                  ids.ReaperWorkflowID(host),
			Workflow:            workflows.ReaperWorkflow,
			Args:                []any{workflows.ReaperInput{Host: host, TTLSec: ttl.Seconds(), RetireAfterSec: retireSec}},
			TaskQueue:           ids.ControlQueue,
			WorkflowRunTimeout:  10 * time.Minute,
			WorkflowTaskTimeout: 10 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		},
	})
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &exists) && !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("reaper schedule: %w", err)
	}
	return nil
}
