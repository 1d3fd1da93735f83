package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/docker/docker/client"
)

// QuotaRunEnv names the run directory of the quota daemon that
// scripts/ensure-xfs-docker.sh starts (its T1FLOW_XFS_RUN); its socket is
// docker.sock there.
const QuotaRunEnv = "T1FLOW_XFS_RUN"

// QuotaSocket is the quota daemon's socket: a second dockerd whose data root
// is a loop filesystem with quotas, so the kernel enforces storage_mb
// (docs/verification.md, "storage_mb").
func QuotaSocket() string {
	run := os.Getenv(QuotaRunEnv)
	if run == "" {
		run = "/run/t1flow-xfs"
	}
	return filepath.Join(run, "docker.sock")
}

// NewClient connects to the daemon sandboxes run on and says which one and
// why. An explicit DOCKER_HOST wins. Else the quota daemon, when its socket
// answers: DOCKER_HOST is then set to it in this process, so that the docker
// CLI and Harbor's code run from here (tests, the Terminus-2 drive) see the
// same containers. Else the default socket, where storage_mb is usually
// only watched (DiskLimit says).
func NewClient(ctx context.Context) (*client.Client, string, error) {
	sock := QuotaSocket()
	if h := os.Getenv(client.EnvOverrideHost); h != "" {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if h == "unix://"+sock {
			return cli, h + " (the quota daemon of scripts/ensure-xfs-docker.sh)", err
		}
		return cli, "DOCKER_HOST=" + h, err
	}
	if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
		host := "unix://" + sock
		cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, "", err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, perr := cli.Ping(pctx)
		cancel()
		if perr == nil {
			os.Setenv(client.EnvOverrideHost, host)
			return cli, host + " (the quota daemon of scripts/ensure-xfs-docker.sh)", nil
		}
		cli.Close()
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	return cli, fmt.Sprintf("the default daemon (no quota daemon answers at %s)", sock), err
}

// sayDiskPlan writes how storage_mb is enforced to the log, loudly when the
// kernel does not: the watcher bounds a slow writer, not a fast one.
func (d *Docker) sayDiskPlan(plan DiskPlan) {
	if !plan.Watch {
		fmt.Fprintf(d.Log, "sandbox: storage_mb enforced by the kernel on %s: %s\n", d.Daemon, plan.Why)
		return
	}
	fmt.Fprintf(d.Log, "sandbox: WARNING: storage_mb is NOT enforced by the kernel on %s: %s. "+
		"A fast writer can fill the host before the watcher stops it; run scripts/ensure-xfs-docker.sh as root "+
		"(docs/verification.md, \"storage_mb\")\n", d.Daemon, plan.Why)
}
