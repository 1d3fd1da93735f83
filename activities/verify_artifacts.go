package activities

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containerd/errdefs"

	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
)

// collectArtifacts copies task.toml's artifacts and Harbor's /logs/artifacts
// out of the sandbox into the artifact store, one tar each (capped), and
// returns claim checks: the bytes never enter a workflow history.
//
// Artifacts are extras, copied after the verdict from paths the agent could
// have changed (a symlink to itself, a fifo, a file too large): one that
// cannot be copied or stored is recorded Missing, with the reason, and never
// fails Verify, which would throw the verdict away and give the agent a
// fresh sandbox.
func (a *Activities) collectArtifacts(ctx context.Context, in VerifyInput, list []task.Artifact) []CollectedArtifact {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // paths of the agent's, each up to MaxArtifactBytes
	all := append([]task.Artifact{{Source: "/logs/artifacts", Destination: "logs-artifacts"}}, list...)
	var out []CollectedArtifact
	for i, art := range all {
		b, err := a.copyOutCapped(ctx, in.Sandbox.ContainerID, art.Source)
		c := CollectedArtifact{Source: art.Source, Destination: art.Destination}
		switch {
		case err != nil && errdefs.IsNotFound(err):
			if i == 0 {
				continue // the convention directory is optional
			}
			c.Missing = "not found in the sandbox"
		case err != nil:
			c.Missing = fmt.Sprintf("could not be copied out: %.300v", err)
		case int64(len(b)) > MaxArtifactBytes:
			c.Missing = fmt.Sprintf("%d bytes, over the %d-byte cap", len(b), MaxArtifactBytes)
		default:
			ref, err := a.Store.Put(ctx, "rollouts/"+ids.Clean(in.RolloutID)+"/artifacts/"+art.Destination+".tar", bytes.NewReader(b))
			if err != nil {
				c.Missing = fmt.Sprintf("could not be stored: %.300v", err)
				break
			}
			c.Ref = &ref
		}
		if c.Missing != "" {
			fmt.Fprintf(a.Docker.Log, "sandbox: %s: artifact %s missing: %s\n", in.Sandbox.Name, art.Source, c.Missing)
		}
		out = append(out, c)
	}
	return out
}

// MaxArtifactBytes caps one collected artifact (its tar).
const MaxArtifactBytes = 16 << 20

func (a *Activities) copyOutCapped(ctx context.Context, id, src string) ([]byte, error) {
	rc, _, err := a.Docker.Client.CopyFromContainer(ctx, id, src)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, MaxArtifactBytes+1))
}
