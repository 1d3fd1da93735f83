// Package gpu is the trainer boundary: a Supervisor that runs the trainer
// (and, as the local default, the reference inference server), the trainer's
// HTTP+JSON client (docs/trainer-protocol.md), GPU slot allocation,
// checkpoints, and the trainer activities, including the ones that load a
// checkpoint into inference servers. The model clients live in inference/.
package gpu

import "github.com/t1flow/t1flow/internal/store"

// TrainRequest is the body of sft, critic_fit and ppo_step.
type TrainRequest struct {
	Key      string         `json:"key"`       // idempotency key: campaign/stage/step
	BatchDir string         `json:"batch_dir"` // local directory of safetensors files + meta.json
	Preset   string         `json:"preset,omitempty"`
	Hyper    map[string]any `json:"hyper,omitempty"`
}

// Metrics are what a training operation reports. Common keys: version,
// weight_version, replayed, seconds; ppo_step adds policy_loss, value_loss,
// clipfrac, approx_kl, entropy, explained_variance, ceiling_ev,
// advantage_mean, actor_updates, kl_stop_minibatch, post_kl, pos_ratio_min,
// pos_ratio_low_share, actor_backtracks, actor_step_share, logprob_gap_replay,
// logprob_gap_noreplay, reward_mean, tokens (docs/trainer-protocol.md).
type Metrics map[string]any

// Float reads a numeric metric (NaN-free callers check ok).
func (m Metrics) Float(k string) (float64, bool) {
	f, ok := m[k].(float64)
	return f, ok
}

// Replayed reports whether the trainer returned a recorded result instead of training.
func (m Metrics) Replayed() bool { b, _ := m["replayed"].(bool); return b }

// Progress is the trainer's current operation.
type Progress struct {
	Op    *string `json:"op"`
	Key   *string `json:"key"`
	Done  int     `json:"done"`
	Total int     `json:"total"`
	// Beat counts work between Done's steps (a whole-batch forward, half a
	// minibatch): it moves the watchdog too. Absent (0) from trainers that
	// only tick.
	Beat    int                `json:"beat"`
	Metrics map[string]float64 `json:"metrics"`
}

// Health is the trainer's /health answer.
type Health struct {
	OK      bool   `json:"ok"`
	Version int    `json:"version"`
	Device  string `json:"device"`
	Busy    bool   `json:"busy"`
	PID     int    `json:"pid"`
	CUDA    bool   `json:"cuda"`
	// Kept is set by TrainerInit on resume: the trainer's own state was
	// kept (it is the campaign's latest), nothing was loaded.
	Kept bool `json:"kept,omitempty"`
}

// ManifestFile is one file of a checkpoint.
type ManifestFile struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// Manifest describes a saved checkpoint directory.
type Manifest struct {
	Version       int            `json:"version"`
	WeightVersion string         `json:"weight_version"`
	Files         []ManifestFile `json:"files"`
	Config        map[string]any `json:"config"`
}

// Checkpoint is a checkpoint in the artifact store (claim check).
type Checkpoint struct {
	Name          string               `json:"name"`
	WeightVersion string               `json:"weight_version"`
	Files         map[string]store.Ref `json:"files"`
}

// TrajectoryRef is one trajectory of a batch, in the artifact store.
type TrajectoryRef struct {
	Trajectory    store.Ref `json:"trajectory"`
	Reward        float64   `json:"reward"`
	PolicyVersion string    `json:"policy_version,omitempty"`
	TaskID        string    `json:"task_id,omitempty"`
	// Temperature is what the trajectory was sampled at; the trainer computes
	// every policy log-prob at it. 0: not recorded (SFT samples, or a batch
	// built before it was recorded), which the trainer reads as 1.0.
	Temperature float64 `json:"temperature,omitempty"`
}

// TrainInput is what a trainer activity gets: references, never bulk data.
type TrainInput struct {
	Key          string          `json:"key"`
	Trajectories []TrajectoryRef `json:"trajectories"`
	// Chunks hold the rest of a batch too big for one payload: each a JSON
	// array of TrajectoryRef in the store, read before Trajectories, in order.
	Chunks []store.Ref `json:"chunks,omitempty"`
	// Seen (critic_fit only) are trajectories the critic was fitted on
	// before, fitted on again with the batch: the critic warm-up's earlier
	// rounds, all rollouts of the same frozen policy. explained_variance_before
	// is measured on the batch alone, which no fit has seen. SeenChunks are
	// Seen's chunks, as Chunks are the batch's.
	Seen       []TrajectoryRef `json:"seen,omitempty"`
	SeenChunks []store.Ref     `json:"seen_chunks,omitempty"`
	Preset     string          `json:"preset,omitempty"`
	Hyper      map[string]any  `json:"hyper,omitempty"`
}

// SaveInput names the checkpoint to write.
type SaveInput struct {
	Name string `json:"name"` // e.g. campaign/step-0003
}
