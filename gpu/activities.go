package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/httpjson"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

// Activities wraps trainer and inference calls for workflows. The trainer
// reads and writes local files only; these activities move data between the
// artifact store and the trainer's host.
type Activities struct {
	Trainer   *Client
	Inference *inference.Client
	// Engine is the local server's engine client (-inference-engine); nil:
	// t1flow's own server behind Inference.
	Engine inference.Engine
	// ProbeTolerance is how far an engine's log-probs on the reload probe may
	// be from the trainer's (0: by the serving dtype, reload.go).
	ProbeTolerance float64
	// UntieHead: the local engine serves tied checkpoints untied (stock vLLM
	// on CPU, untied.go), so every checkpoint it loads carries its LM head.
	UntieHead bool
	Store     store.Store
	WorkDir   string // local scratch: batches/ and checkpoints/
	// Running reports whether a campaign's workflow still runs (for the
	// trainer's lease, lease.go); nil: a holder is taken to run.
	Running func(ctx context.Context, campaign string) (bool, error)
	// StallWindow: a training operation whose progress does not move for
	// this long is hung (0: DefaultStallWindow); RestartTrainer (the
	// supervisor's Kill) then restarts the trainer.
	StallWindow    time.Duration
	RestartTrainer func()
	// Model is the checkpoint directory the hf backend's processes started
	// from (-model): a campaign's random init starts from it (TrainerInit).
	// Empty for the reference, whose random init is random weights.
	Model string
	// Name is this trainer's name (default: the worker's host); its own
	// queue is ids.TrainerQueue(Name), where the campaigns pinned to it call
	// (pin.go). Empty: the worker serves the shared queue only.
	Name string
	held held // local checkpoint copies in use (retention.go)
}

// TrainerSFT runs supervised fine-tuning on masked trajectories.
func (a *Activities) TrainerSFT(ctx context.Context, in TrainInput) (Metrics, error) {
	return a.train(ctx, "sft", in)
}

// TrainerCriticFit regresses the critic on the batch's returns.
func (a *Activities) TrainerCriticFit(ctx context.Context, in TrainInput) (Metrics, error) {
	return a.train(ctx, "critic_fit", in)
}

// TrainerPPOStep runs one PPO update with R3 replay.
func (a *Activities) TrainerPPOStep(ctx context.Context, in TrainInput) (Metrics, error) {
	return a.train(ctx, "ppo_step", in)
}

func (a *Activities) train(ctx context.Context, op string, in TrainInput) (Metrics, error) {
	if in.Key == "" || len(in.Trajectories)+len(in.Chunks) == 0 {
		return nil, errs.BadInputf("%s: key and trajectories are required", op)
	}
	if op != "critic_fit" && len(in.Seen)+len(in.SeenChunks) > 0 {
		return nil, errs.BadInputf("%s: seen trajectories are for critic_fit only", op)
	}
	if err := a.checkLease(in.Key); err != nil {
		return nil, err
	}
	dir, err := a.materialize(ctx, in)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := a.watchProgress(ctx, cancel)
	m, err := a.Trainer.Train(tctx, op, TrainRequest{Key: in.Key, BatchDir: dir, Preset: in.Preset, Hyper: in.Hyper})
	if stalled := stop(); stalled != nil && err != nil && ctx.Err() == nil {
		// Hung: restarted, it rolls back to its last commit, and the retry
		// with the same key trains once.
		a.restartTrainer()
		return nil, stalled
	}
	if ctx.Err() != nil {
		// Cancellation passes through: the trainer drops the step and rolls back.
		a.Trainer.Cancel(context.WithoutCancel(ctx), in.Key)
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, classify(err)
	}
	os.RemoveAll(dir)
	return m, nil
}

// classify maps trainer answers onto the error table: a trainer that crashed
// or is restarting is infrastructure (retried, and the retry with the same key
// trains once); bad input and missing routing are not retried.
func classify(err error) error {
	var se *httpjson.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Status == 422:
			return errs.BadInputf("%s: %s", se.Op, se.Msg) // RoutingMissing inside a batch: a bug upstream, never trained on
		case se.Status == 409:
			return errs.Infraf("%s: %s", se.Op, se.Msg)
		case se.Status/100 == 4:
			return errs.BadInputf("%s: %s", se.Op, se.Msg)
		}
	}
	return errs.Infraf("trainer: %v", err)
}

// batchMeta is the trainer's meta.json.
type batchMeta struct {
	Trajectories []batchEntry `json:"trajectories"`
}

type batchEntry struct {
	File          string  `json:"file"`
	Reward        float64 `json:"reward"`
	PolicyVersion string  `json:"policy_version,omitempty"`
	TaskID        string  `json:"task_id,omitempty"`
	Temperature   float64 `json:"temperature,omitempty"` // omitted: the trainer's default, 1.0
	Seen          bool    `json:"seen,omitempty"`        // critic_fit: fitted on before (TrainInput.Seen)
}

// materialize writes the batch directory from the store, checking every sha256.
func (a *Activities) materialize(ctx context.Context, in TrainInput) (string, error) {
	dir := filepath.Join(a.WorkDir, "batches", ids.Clean(in.Key))
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", errs.Infraf("batch dir: %v", err)
	}
	seen, err := a.batchOf(ctx, "seen_chunks", in.SeenChunks, in.Seen)
	if err != nil {
		return "", err
	}
	trajs, err := a.batchOf(ctx, "chunks", in.Chunks, in.Trajectories)
	if err != nil {
		return "", err
	}
	trajs = append(append([]TrajectoryRef(nil), seen...), trajs...)
	var meta batchMeta
	got := newBytesProgress("download batch")
	for i, t := range trajs {
		b, err := a.Store.Get(ctx, t.Trajectory)
		if err != nil {
			var ce *store.ChecksumError
			if errors.As(err, &ce) {
				return "", errs.BadInputf("trajectory %d: %v", i, err)
			}
			return "", errs.Infraf("trajectory %d: %v", i, err)
		}
		name := fmt.Sprintf("traj-%05d.safetensors", i)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", errs.Infraf("write %s: %v", name, err)
		}
		got.moved(ctx, len(trajs), len(b))
		meta.Trajectories = append(meta.Trajectories, batchEntry{File: name, Reward: t.Reward, PolicyVersion: t.PolicyVersion, TaskID: t.TaskID, Temperature: t.Temperature, Seen: i < len(seen)})
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644); err != nil {
		return "", errs.Infraf("write meta.json: %v", err)
	}
	return dir, nil
}

// batchOf is a batch's trajectories: those of its chunks, in order, then
// the inline ones. A chunk that fails its checksum or does not parse is bad
// input, named by field (chunks or seen_chunks) and index.
func (a *Activities) batchOf(ctx context.Context, field string, chunks []store.Ref, inline []TrajectoryRef) ([]TrajectoryRef, error) {
	if len(chunks) == 0 {
		return inline, nil
	}
	var out []TrajectoryRef
	for i, ref := range chunks {
		b, err := a.Store.Get(ctx, ref)
		if err != nil {
			var ce *store.ChecksumError
			if errors.As(err, &ce) {
				return nil, errs.BadInputf("%s[%d] %s: %v", field, i, ref.URI, err)
			}
			return nil, errs.Infraf("%s[%d] %s: %v", field, i, ref.URI, err)
		}
		var part []TrajectoryRef
		if err := json.Unmarshal(b, &part); err != nil || len(part) == 0 {
			return nil, errs.BadInputf("%s[%d] %s: not a non-empty JSON array of trajectory refs (%v)", field, i, ref.URI, err)
		}
		out = append(out, part...)
	}
	return append(out, inline...), nil
}

// TrainerSave writes a checkpoint and uploads it to the artifact store.
func (a *Activities) TrainerSave(ctx context.Context, in SaveInput) (Checkpoint, error) {
	if in.Name == "" {
		return Checkpoint{}, errs.BadInputf("save: name is required")
	}
	dir := filepath.Join(a.WorkDir, "checkpoints", ids.Clean(in.Name))
	a.dropStaleSaves(dir)
	stop := a.alive(ctx, "trainer saving")
	m, err := a.Trainer.Save(ctx, dir)
	stop()
	if err != nil {
		return Checkpoint{}, classify(err)
	}
	ck := Checkpoint{Name: in.Name, WeightVersion: m.WeightVersion, Files: map[string]store.Ref{}}
	names := []string{"manifest.json"}
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	sent := newBytesProgress("upload checkpoint")
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return Checkpoint{}, errs.Infraf("read %s: %v", n, err)
		}
		ref, err := a.Store.Put(ctx, "checkpoints/"+ids.Clean(in.Name)+"/"+n, bytes.NewReader(b))
		if err != nil {
			return Checkpoint{}, errs.Infraf("upload %s: %v", n, err)
		}
		ck.Files[n] = ref
		sent.moved(ctx, len(names), len(b))
	}
	// The record goes last: a checkpoint whose upload was cut short has none,
	// so it is never found by name.
	if err := putCheckpointRecord(ctx, a.Store, ck); err != nil {
		return Checkpoint{}, errs.Infraf("%v", err)
	}
	// Only now, with the store's copy complete, does the local one leave
	// checkpoints/: to fetched/, where the load that follows finds it.
	a.keepSaved(dir, in.Name)
	return ck, nil
}

// fetchCheckpoint downloads a checkpoint into a local directory (checked);
// a local copy that matches every file's sha256 is used as it is.
func (a *Activities) fetchCheckpoint(ctx context.Context, ck Checkpoint) (string, error) {
	dir := a.fetchedDir(ck.Name)
	if haveLocal(dir, ck) {
		return dir, nil
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", errs.Infraf("%v", err)
	}
	got := newBytesProgress("download checkpoint")
	for n, ref := range ck.Files {
		b, err := a.Store.Get(ctx, ref)
		if err != nil {
			return "", errs.Infraf("checkpoint %s/%s: %v", ck.Name, n, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, filepath.Base(n)), b, 0o644); err != nil {
			return "", errs.Infraf("%v", err)
		}
		got.moved(ctx, len(ck.Files), len(b))
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", errs.Infraf("%v", err)
	}
	return dir, nil
}

// TrainerLoad replaces the trainer's weights with a stored checkpoint.
func (a *Activities) TrainerLoad(ctx context.Context, ck Checkpoint) (Health, error) {
	defer a.hold(a.fetchedDir(ck.Name))()
	dir, err := a.fetchCheckpoint(ctx, ck)
	if err != nil {
		return Health{}, err
	}
	stop := a.alive(ctx, "trainer loading")
	h, err := a.Trainer.Load(ctx, dir)
	stop()
	if err != nil {
		return h, classify(err)
	}
	a.pruneFetched(dir)
	return h, nil
}
