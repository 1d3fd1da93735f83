// Package sandbox runs t1flow's Docker sandboxes: the base and task images
// (with the alias map that keeps every build offline), one container per
// rollout attempt with its limits and t1flow.* labels, exec with capped output
// and timeouts, and copying files in and out. It knows nothing of Temporal:
// activities/ wraps it in activity methods, and its tests need only Docker.
package sandbox

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sync/singleflight"
)

// Docker wraps the Docker client with t1flow's image and container rules.
type Docker struct {
	Client *client.Client
	// Daemon says which daemon Client talks to and why (NewClient).
	Daemon string
	// Aliases maps FROM image patterns ('*' matches anything) to local images;
	// "@base" is the sandbox base image.
	Aliases map[string]string
	// StateDir holds build locks and the debootstrap scratch space.
	StateDir string
	// Mirror is the Debian mirror for debootstrap; empty reads the apt sources.
	Mirror string
	Log    io.Writer

	builds singleflight.Group
	debs   *DebCache
	debsMu sync.Mutex
	// present remembers images seen on the daemon: tags are content hashes, so
	// a tag once present means the same image (a sandbox create that finds it
	// gone forgets it).
	present sync.Map
	// toolchain is the sealed verifier toolchain every sandbox gets mounted
	// (EnsureToolchain); nil until it is ready.
	toolchain atomic.Pointer[Toolchain]
	// diskSaid is set once the storage_mb plan has been written to Log.
	diskSaid atomic.Bool
}

// NewDocker connects to the daemon NewClient picks (DOCKER_HOST, else the
// quota daemon when it answers, else the default socket), negotiating the API
// version, and checks that it answers.
func NewDocker(ctx context.Context, stateDir string) (*Docker, error) {
	cli, which, err := NewClient(ctx)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		return nil, fmt.Errorf("docker daemon %s does not answer (%v): run scripts/ensure-sandbox-host.sh, or install Docker and start dockerd", which, err)
	}
	aliases := map[string]string{}
	for k, v := range DefaultAliases {
		aliases[k] = v
	}
	return &Docker{Client: cli, Daemon: which, Aliases: aliases, StateDir: stateDir, Log: io.Discard}, nil
}

// LoadAliases merges an alias file (TOML: [aliases] "pattern" = "image").
func (d *Docker) LoadAliases(path string) error {
	var f struct{ Aliases map[string]string }
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range md.Undecoded() {
		return fmt.Errorf("%s: unknown key %s (expected only [aliases])", path, k)
	}
	for k, v := range f.Aliases {
		d.Aliases[k] = v
	}
	return nil
}

func (d *Docker) imageExists(ctx context.Context, ref string) (bool, error) {
	if _, ok := d.present.Load(ref); ok {
		return true, nil
	}
	_, err := d.Client.ImageInspect(ctx, ref)
	if err == nil {
		d.present.Store(ref, true)
		return true, nil
	}
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return false, err
}

// Debs is the host's cache of Debian packages the tamper check compares a
// sandbox's NSS modules with (under StateDir, shared by every sandbox).
func (d *Docker) Debs() *DebCache {
	d.debsMu.Lock()
	defer d.debsMu.Unlock()
	if d.debs == nil {
		d.debs = &DebCache{Dir: filepath.Join(d.StateDir, "debs")}
	}
	return d.debs
}
