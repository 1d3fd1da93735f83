package gpu

// Publishing checkpoints to inference servers: the trainer boundary's other
// half, so the weights a rollout samples are the ones a step trained.

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// LoadInput names a checkpoint and the inference servers that must serve it.
type LoadInput struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	// URLs of the servers; empty means this worker's local server. Servers
	// read the checkpoint from this worker's disk, so they run on this host or
	// share its file system (as SGLang replicas on one node do).
	URLs []string `json:"urls,omitempty"`
}

// InferenceLoadAll loads a stored checkpoint into every named server and
// returns the weight version they all serve now.
func (a *Activities) InferenceLoadAll(ctx context.Context, in LoadInput) (string, error) {
	dir, err := a.fetchCheckpoint(ctx, in.Checkpoint)
	if err != nil {
		return "", err
	}
	urls := in.URLs
	if len(urls) == 0 {
		urls = []string{a.Inference.BaseURL}
	}
	for _, u := range urls {
		version, err := loadInto(ctx, &inference.Client{BaseURL: u, HTTP: a.Inference.HTTP}, dir)
		if err != nil {
			return "", err
		}
		if version != in.Checkpoint.WeightVersion {
			return "", errs.Infraf("%s serves %s after loading checkpoint %s (%s)", u, version, in.Checkpoint.Name, in.Checkpoint.WeightVersion)
		}
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, u)
		}
	}
	return in.Checkpoint.WeightVersion, nil
}

// InferenceLoad points the local inference server at a stored checkpoint and
// returns the weight version it now serves. (Recorded histories call it;
// new workflow code calls InferenceLoadAll.)
func (a *Activities) InferenceLoad(ctx context.Context, ck Checkpoint) (string, error) {
	dir, err := a.fetchCheckpoint(ctx, ck)
	if err != nil {
		return "", err
	}
	return loadInto(ctx, a.Inference, dir)
}

// loadInto has one server load a local checkpoint directory and returns the
// weight version it serves afterwards.
func loadInto(ctx context.Context, c *inference.Client, dir string) (string, error) {
	if err := c.UpdateWeightsFromDisk(ctx, dir, ""); err != nil {
		return "", classify(fmt.Errorf("%s: %w", c.BaseURL, err))
	}
	info, err := c.ModelInfo(ctx)
	if err != nil {
		return "", classify(fmt.Errorf("%s: %w", c.BaseURL, err))
	}
	return info.WeightVersion, nil
}

// InferenceInfo names the inference server this GPU worker runs and the
// weight version it serves, so workflows can hand its URL to rollouts.
type InferenceInfo struct {
	URLs          []string `json:"urls"`
	WeightVersion string   `json:"weight_version"`
}

// InferenceInfo reports the local inference server.
func (a *Activities) InferenceInfo(ctx context.Context) (InferenceInfo, error) {
	info, err := a.Inference.ModelInfo(ctx)
	if err != nil {
		return InferenceInfo{}, classify(err)
	}
	return InferenceInfo{URLs: []string{a.Inference.BaseURL}, WeightVersion: info.WeightVersion}, nil
}
