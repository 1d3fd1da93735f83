package gpu

// Publishing checkpoints to inference servers: the trainer boundary's other
// half, so the weights a rollout samples are the ones a step trained. Every
// reload is verified (reload.go) before the version is reported served.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"

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

// engine is the client of the server at u (this worker's own, or a
// replica of the same kind).
func (a *Activities) engine(u string) inference.Engine {
	own := a.localEngine()
	if u == "" || u == own.URL() {
		return own
	}
	e, err := inference.NewEngine(own.Kind(), u, a.httpClient())
	if err != nil {
		return own // the kind was checked when the worker started
	}
	return e
}

// localEngine is this worker's inference server's client.
func (a *Activities) localEngine() inference.Engine {
	if a.Engine != nil {
		return a.Engine
	}
	return &inference.T1flow{SGLang: inference.SGLang{Client: a.Inference}}
}

func (a *Activities) httpClient() *http.Client {
	if a.Inference != nil {
		return a.Inference.HTTP
	}
	return nil
}

// InferenceLoadAll loads a stored checkpoint into every named server and
// returns the weight version they all serve now.
func (a *Activities) InferenceLoadAll(ctx context.Context, in LoadInput) (string, error) {
	base := a.fetchedDir(in.Checkpoint.Name)
	defer a.hold(base)()
	dir, err := a.servingCheckpoint(ctx, in.Checkpoint)
	if err != nil {
		return "", err
	}
	urls := in.URLs
	if len(urls) == 0 {
		urls = []string{a.localEngine().URL()}
	}
	for _, u := range urls {
		if err := a.loadVerified(ctx, a.engine(u), dir, in.Checkpoint.WeightVersion); err != nil {
			return "", err
		}
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, u)
		}
	}
	a.pruneFetched(base)
	return in.Checkpoint.WeightVersion, nil
}

// InferenceLoad points the local inference server at a stored checkpoint and
// returns the weight version it now serves. (Recorded histories call it;
// new workflow code calls InferenceLoadAll.)
func (a *Activities) InferenceLoad(ctx context.Context, ck Checkpoint) (string, error) {
	base := a.fetchedDir(ck.Name)
	defer a.hold(base)()
	dir, err := a.servingCheckpoint(ctx, ck)
	if err != nil {
		return "", err
	}
	if err := a.loadVerified(ctx, a.localEngine(), dir, ck.WeightVersion); err != nil {
		return "", err
	}
	a.pruneFetched(base)
	return ck.WeightVersion, nil
}

// servingCheckpoint fetches a checkpoint and returns the directory an engine
// loads: the policy's files only. SGLang loads every *.safetensors of a
// directory without an index, so the critic (critic.safetensors), the
// optimiser and the manifest stay out of it.
func (a *Activities) servingCheckpoint(ctx context.Context, ck Checkpoint) (string, error) {
	dir, err := a.fetchCheckpoint(ctx, ck)
	if err != nil {
		return "", err
	}
	serve := dir + ".serve"
	untie := false
	if a.UntieHead {
		if untie, err = tiedEmbeddings(dir); err != nil {
			return "", errs.Infraf("%v", err)
		}
	}
	if err := linkView(dir, serve, servedFile, untie); err != nil {
		return "", errs.Infraf("%v", err)
	}
	return serve, nil
}

// servedFile says whether a checkpoint file belongs in the engine's directory.
func servedFile(name string) bool {
	switch {
	case name == "manifest.json", name == "optim.pt":
		return false
	case filepath.Ext(name) == ".safetensors" && len(name) >= 6 && name[:6] == "critic":
		return false
	}
	return true
}

// InferenceInfo names the inference server this GPU worker runs and the
// weight version it serves, so workflows can hand its URL to rollouts.
type InferenceInfo struct {
	URLs          []string `json:"urls"`
	WeightVersion string   `json:"weight_version"`
}

// InferenceInfo reports the local inference server. An engine that came
// back from a restart serving other weights than the last verified load
// (a stock engine serves its launch weights) is given that checkpoint again
// first.
func (a *Activities) InferenceInfo(ctx context.Context) (InferenceInfo, error) {
	e := a.localEngine()
	info, err := e.Info(ctx)
	if err != nil {
		return InferenceInfo{}, classify(err)
	}
	if last, ok := a.lastServed(); ok && info.WeightVersion != last.Version {
		if err := a.loadVerified(ctx, e, last.Dir, last.Version); err != nil {
			return InferenceInfo{}, err
		}
		info.WeightVersion = last.Version
	}
	return InferenceInfo{URLs: []string{e.URL()}, WeightVersion: info.WeightVersion}, nil
}

// served is the last checkpoint this worker's server verifiably serves.
type served struct {
	Dir     string `json:"dir"`
	Version string `json:"weight_version"`
}

func (a *Activities) servedPath() string { return filepath.Join(a.WorkDir, "inference.verified.json") }

func (a *Activities) lastServed() (served, bool) {
	var s served
	b, err := os.ReadFile(a.servedPath())
	if err != nil || json.Unmarshal(b, &s) != nil || s.Dir == "" {
		return s, false
	}
	if _, err := os.Stat(s.Dir); err != nil {
		return s, false
	}
	return s, true
}

func (a *Activities) rememberServed(e inference.Engine, dir, version string) {
	if e.URL() != a.localEngine().URL() || a.WorkDir == "" {
		return
	}
	b, _ := json.Marshal(served{Dir: dir, Version: version})
	tmp := a.servedPath() + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, a.servedPath())
	}
}
