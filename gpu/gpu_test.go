package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/trajectory"
)

func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(Python(), "-c", "import torch").Run(); err != nil {
		msg := fmt.Sprintf("%s cannot import torch (apt-get install python3-torch libopenblas0-pthread)", Python())
		// testenv imports this package, so the test cannot use it.
		if os.Getenv("T1FLOW_INTEGRATION") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func supervise(t *testing.T, name string, cmd []string) *Supervisor {
	t.Helper()
	s := &Supervisor{Name: name, Command: cmd, LogPath: filepath.Join(t.TempDir(), name+".log"), Env: Slot{}.Env()}
	if err := s.Start(context.Background()); err != nil {
		log, _ := os.ReadFile(s.LogPath)
		t.Fatalf("%v\n%s", err, log)
	}
	t.Cleanup(s.Stop)
	return s
}

// sample generates n trajectories from the inference server and stores them.
func sample(t *testing.T, inf *inference.Client, st store.Store, n int, prefix string) []TrajectoryRef {
	t.Helper()
	ctx := context.Background()
	info, err := inf.ModelInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var refs []TrajectoryRef
	for i := 0; i < n; i++ {
		prompt := []int{info.SpecialTokens["<|bos|>"]}
		for _, c := range fmt.Sprintf("task %d: list files", i) {
			prompt = append(prompt, int(c))
		}
		seed := int64(i)
		resp, err := inf.Generate(ctx, inference.GenerateRequest{InputIDs: prompt, SamplingParams: inference.SamplingParams{Temperature: 1, MaxNewTokens: 16, Seed: &seed},
			ReturnLogprob: true, ReturnRoutedExperts: true})
		if err != nil {
			t.Fatal(err)
		}
		rec := trajectory.Record{Layers: info.NumLayers, TopK: info.TopK, Experts: info.NumExperts}
		lps, err := resp.Logprobs()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range prompt {
			rec.Tokens, rec.LossMask, rec.Logprobs = append(rec.Tokens, int32(p)), append(rec.LossMask, 0), append(rec.Logprobs, 0)
		}
		for j, o := range resp.OutputIDs {
			rec.Tokens, rec.LossMask, rec.Logprobs = append(rec.Tokens, int32(o)), append(rec.LossMask, 1), append(rec.Logprobs, lps[j])
		}
		if resp.MetaInfo.RoutedExperts != "" {
			if rec.Routing, err = resp.RoutedExperts(); err != nil {
				t.Fatal(err)
			}
			if want := (len(rec.Tokens) - 1) * info.NumLayers * info.TopK; len(rec.Routing) != want {
				t.Fatalf("routing covers %d entries, want %d (T−1 rows: every position but the last sampled token)", len(rec.Routing), want)
			}
		}
		b, err := rec.Encode()
		if err != nil {
			t.Fatal(err)
		}
		ref, err := st.Put(ctx, fmt.Sprintf("%s/traj-%d.safetensors", prefix, i), bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, TrajectoryRef{Trajectory: ref, Reward: float64(i%3) / 2, PolicyVersion: resp.MetaInfo.WeightVersion})
	}
	return refs
}

type rig struct {
	trainer *Supervisor
	inf     *Supervisor
	acts    *Activities
	work    string
}

func newRig(t *testing.T, trainerArgs ...string) *rig {
	needTorch(t)
	work := t.TempDir()
	st, _ := store.NewLocal(filepath.Join(work, "store"))
	inf := supervise(t, "inference", InferenceCommand("", Slot{}, "--seed", "0", "--threads", "1"))
	tr := supervise(t, "trainer", TrainerCommand(filepath.Join(work, "trainer"), Slot{}, append([]string{"--seed", "0", "--threads", "1"}, trainerArgs...)...))
	return &rig{trainer: tr, inf: inf, work: work, acts: &Activities{
		Trainer: NewClient(tr.URL()), Inference: &inference.Client{BaseURL: inf.URL()}, Store: st, WorkDir: filepath.Join(work, "scratch"),
	}}
}

func TestTrainerLifecycleThroughSupervisor(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	refs := sample(t, r.acts.Inference, r.acts.Store, 3, "b1")

	m, err := r.acts.TrainerSFT(ctx, TrainInput{Key: "camp/sft/0", Trajectories: refs, Preset: "small"})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Float("version"); v != 1 {
		t.Fatalf("sft: version %v, want 1 (%v)", v, m)
	}
	m, err = r.acts.TrainerCriticFit(ctx, TrainInput{Key: "camp/critic/0", Trajectories: refs, Preset: "small", Hyper: map[string]any{"epochs": 5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Float("explained_variance_before"); !ok {
		t.Fatalf("critic_fit metrics: %v", m)
	}
	// The policy moved: hand its weights to inference and sample with them, as a campaign does.
	ck1, err := r.acts.TrainerSave(ctx, SaveInput{Name: "camp/step-0000"})
	if err != nil {
		t.Fatal(err)
	}
	if wv, err := r.acts.InferenceLoad(ctx, ck1); err != nil || wv != "v2" {
		t.Fatalf("inference serves %q (%v), want v2", wv, err)
	}
	refs = sample(t, r.acts.Inference, r.acts.Store, 3, "b2")
	if refs[0].PolicyVersion != "v2" {
		t.Fatalf("trajectories record policy %q, want v2", refs[0].PolicyVersion)
	}
	m, err = r.acts.TrainerPPOStep(ctx, TrainInput{Key: "camp/ppo/1", Trajectories: refs, Preset: "small"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy_loss", "value_loss", "clipfrac", "approx_kl", "entropy", "logprob_gap_replay", "logprob_gap_noreplay"} {
		if _, ok := m.Float(k); !ok {
			t.Errorf("ppo_step metric %s missing: %v", k, m)
		}
	}
	// Same weights, float32 on both sides: with the server's routing replayed
	// the trainer reproduces the sampler's log-probs.
	if g, _ := m.Float("logprob_gap_replay"); g > 1e-3 {
		t.Errorf("logprob_gap_replay %v: the trainer does not reproduce the sampler with its routing", g)
	}
	ck, err := r.acts.TrainerSave(ctx, SaveInput{Name: "camp/step-0001"})
	if err != nil {
		t.Fatal(err)
	}
	if ck.WeightVersion != "v3" || ck.Files["model.safetensors"].SHA256 == "" || ck.Files["manifest.json"].URI == "" {
		t.Fatalf("checkpoint %+v", ck)
	}
	h, err := r.acts.TrainerLoad(ctx, ck)
	if err != nil || h.Version != 3 {
		t.Fatalf("load: %+v %v", h, err)
	}
	wv, err := r.acts.InferenceLoad(ctx, ck)
	if err != nil || wv != "v3" {
		t.Fatalf("inference now serves %q (%v), want v3", wv, err)
	}
	again := sample(t, r.acts.Inference, r.acts.Store, 1, "b3")
	if again[0].PolicyVersion != "v3" {
		t.Fatalf("trajectories after the reload record policy %q", again[0].PolicyVersion)
	}
}

func TestKilledMidStepTrainsOnce(t *testing.T) {
	r := newRig(t, "--slow-ms", "250")
	ctx := context.Background()
	refs := sample(t, r.acts.Inference, r.acts.Store, 2, "b")
	in := TrainInput{Key: "camp/ppo/7", Trajectories: refs, Preset: "small", Hyper: map[string]any{"update_epochs": 20}}
	before, err := r.acts.Trainer.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := r.acts.TrainerPPOStep(ctx, in); errc <- err }()
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := r.acts.Trainer.Progress(ctx)
		if err == nil && p.Op != nil && p.Done >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the step never got going")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.trainer.Kill()
	err = <-errc
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.Infra {
		t.Fatalf("a killed trainer should be an InfraError (retried), got %v", err)
	}
	if err := r.trainer.WaitRestarted(ctx, 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	h, _ := r.acts.Trainer.Health(ctx)
	if h.Version != before.Version {
		t.Fatalf("after the crash the trainer is at version %d, want the last commit %d", h.Version, before.Version)
	}
	m, err := r.acts.TrainerPPOStep(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if m.Replayed() {
		t.Fatal("the interrupted step was never committed, so the retry must train")
	}
	m2, err := r.acts.TrainerPPOStep(ctx, in)
	if err != nil || !m2.Replayed() || m2["version"] != m["version"] {
		t.Fatalf("a repeated key must return the recorded result: %v %v", m2, err)
	}
	log, _ := os.ReadFile(filepath.Join(r.work, "trainer", "ops.log"))
	if n := strings.Count(string(log), "commit ppo_step camp/ppo/7"); n != 1 {
		t.Fatalf("step committed %d times:\n%s", n, log)
	}
	if h, _ := r.acts.Trainer.Health(ctx); h.Version != before.Version+1 {
		t.Fatalf("version %d, want %d: the step trained more than once", h.Version, before.Version+1)
	}
}

func TestMissingRoutingIsNeverTrainedOn(t *testing.T) {
	needTorch(t)
	work := t.TempDir()
	st, _ := store.NewLocal(filepath.Join(work, "store"))
	inf := supervise(t, "inference", InferenceCommand("", Slot{}, "--seed", "0", "--drop-routing-frac", "1"))
	tr := supervise(t, "trainer", TrainerCommand(filepath.Join(work, "trainer"), Slot{}, "--seed", "0"))
	acts := &Activities{Trainer: NewClient(tr.URL()), Store: st, WorkDir: work}
	refs := sample(t, &inference.Client{BaseURL: inf.URL()}, st, 2, "b")
	_, err := acts.TrainerPPOStep(context.Background(), TrainInput{Key: "k", Trajectories: refs})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.NonRetryable() == false || !strings.Contains(ae.Error(), "RoutingMissing") {
		t.Fatalf("want a non-retryable RoutingMissing rejection, got %v", err)
	}
	if h, _ := acts.Trainer.Health(context.Background()); h.Version != 0 {
		t.Fatalf("the trainer trained on a batch without routing (version %d)", h.Version)
	}
}

func TestSlots(t *testing.T) {
	s, err := Slots("0,1,2,3", 2)
	if err != nil || len(s) != 2 || s[1].Env()[0] != "CUDA_VISIBLE_DEVICES=2,3" || s[0].Device() != "cuda" {
		t.Fatalf("%v %v", s, err)
	}
	s, err = Slots("cpu", 1)
	if err != nil || len(s) != 1 || s[0].Device() != "cpu" {
		t.Fatalf("%v %v", s, err)
	}
	if _, err := Slots("0,1,2", 2); err == nil || !strings.Contains(err.Error(), "groups of 2") {
		t.Fatalf("uneven split: %v", err)
	}
	if _, err := Slots("zero", 1); err == nil || !strings.Contains(err.Error(), "--gpus") {
		t.Fatalf("bad spec: %v", err)
	}
}

func TestTrainerActivityHeartbeatsProgress(t *testing.T) {
	r := newRig(t, "--slow-ms", "300")
	refs := sample(t, r.acts.Inference, r.acts.Store, 2, "hb")
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	// The SDK sends at most one heartbeat per 30 s window (no heartbeat
	// timeout here), so the listener would see only the first; the activity's
	// own RecordHeartbeat calls are what this test is about.
	rec := &beatRecorder{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{rec}})
	env.RegisterActivity(r.acts)
	val, err := env.ExecuteActivity(r.acts.TrainerCriticFit, TrainInput{Key: "hb/critic", Trajectories: refs, Preset: "small", Hyper: map[string]any{"epochs": 12}})
	if err != nil {
		t.Fatal(err)
	}
	var m Metrics
	if err := val.Get(&m); err != nil {
		t.Fatal(err)
	}
	// Progress counts optimizer steps: 12 epochs × 2 minibatches (the default
	// 4 minibatches, capped at one trajectory each for this 2-trajectory batch).
	// The op sleeps 300 ms after each, and progress is read every 2 s: the
	// heartbeats must show it moving, not only its start.
	beats := rec.progress()
	moved := map[int]bool{}
	for _, p := range beats {
		if p.Op == nil || *p.Op != "critic_fit" || (p.Total != 0 && p.Total != 24) || p.Done > p.Total {
			t.Fatalf("a heartbeat that is not this op's progress: %+v", p)
		}
		if p.Total == 24 {
			moved[p.Done] = true
		}
	}
	if len(moved) < 2 {
		t.Fatalf("heartbeats did not carry the trainer's progress as it moved: %+v", beats)
	}
}

// beatRecorder keeps every Progress an activity heartbeats with.
type beatRecorder struct {
	interceptor.WorkerInterceptorBase
	mu    sync.Mutex
	beats []Progress
}

func (b *beatRecorder) progress() []Progress {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Progress(nil), b.beats...)
}

func (b *beatRecorder) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &beatInbound{rec: b}
	i.Next = next
	return i
}

type beatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	rec *beatRecorder
}

func (i *beatInbound) Init(out interceptor.ActivityOutboundInterceptor) error {
	o := &beatOutbound{rec: i.rec}
	o.Next = out
	return i.Next.Init(o)
}

type beatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	rec *beatRecorder
}

func (o *beatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	for _, d := range details {
		if p, ok := d.(Progress); ok {
			o.rec.mu.Lock()
			o.rec.beats = append(o.rec.beats, p)
			o.rec.mu.Unlock()
		}
	}
	o.Next.RecordHeartbeat(ctx, details...)
}

// A worker killed with -9 leaves its GPU processes running; the next
// supervisor of the same PID file stops the orphan before starting.
func TestSupervisorStopsOrphans(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	mk := func() *Supervisor {
		return &Supervisor{Name: "inference", Command: InferenceCommand("", Slot{}, "--threads", "1"),
			LogPath: filepath.Join(dir, "inf.log"), PIDFile: filepath.Join(dir, "inf.pid"), PortFile: filepath.Join(dir, "inf.port")}
	}
	first := mk()
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	orphan := first.PID()
	// Simulate the worker's death: forget the first supervisor without stopping it.
	first.mu.Lock()
	first.stopping = true
	first.mu.Unlock()
	second := mk()
	if err := second.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(orphan, 0); err == nil {
		syscall.Kill(orphan, syscall.SIGKILL)
		t.Fatalf("orphan %d still runs beside %d", orphan, second.PID())
	}
	// The orphan held the port; the new process serves the same URL anyway.
	if second.URL() != first.URL() {
		t.Fatalf("the restarted process moved from %s to %s", first.URL(), second.URL())
	}
}

// A trainer that hangs mid-operation (still answering /progress and /health)
// is found once its progress has not moved for the stall window: the activity
// fails retryably, the trainer is restarted from its last commit, and the
// retry with the same key trains once.
func TestHungTrainerIsRestarted(t *testing.T) {
	hang := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(hang, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, "--hang-once", hang)
	r.acts.StallWindow = 6 * time.Second
	r.acts.RestartTrainer = r.trainer.Kill
	ctx := context.Background()
	refs := sample(t, r.acts.Inference, r.acts.Store, 2, "hang")
	in := TrainInput{Key: "camp/critic/hang", Trajectories: refs, Preset: "small", Hyper: map[string]any{"epochs": 4}}
	start := time.Now()
	_, err := r.acts.TrainerCriticFit(ctx, in)
	took := time.Since(start)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.Infra || ae.NonRetryable() || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("a hung trainer should be a retryable stall, got %v", err)
	}
	if took > r.acts.StallWindow+2*progressPoll+5*time.Second {
		t.Fatalf("the stall was found after %s, window %s", took, r.acts.StallWindow)
	}
	if _, err := os.Stat(hang); !os.IsNotExist(err) {
		t.Fatal("the trainer never hung")
	}
	if err := r.trainer.WaitRestarted(ctx, 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	m, err := r.acts.TrainerCriticFit(ctx, in)
	if err != nil || m.Replayed() {
		t.Fatalf("retry after the restart: %v %v", m, err)
	}
	log, _ := os.ReadFile(filepath.Join(r.work, "trainer", "ops.log"))
	if n := strings.Count(string(log), "commit critic_fit camp/critic/hang"); n != 1 {
		t.Fatalf("committed %d times:\n%s", n, log)
	}
}

// TestHungInferenceServerIsRestarted: an inference server that hangs in
// /generate (still answering /health) is found by its supervisor's watchdog
// within 1.5 windows and restarted, and serves again; one that answers is
// left alone.
func TestHungInferenceServerIsRestarted(t *testing.T) {
	needTorch(t)
	hang := filepath.Join(t.TempDir(), "hang")
	window := 9 * time.Second // probes time out after 3 s: a loaded machine still answers
	s := &Supervisor{Name: "inference", Command: InferenceCommand("", Slot{}, "--seed", "0", "--threads", "1", "--hang-once", hang),
		LogPath: filepath.Join(t.TempDir(), "inference.log"), Env: Slot{}.Env(), Watchdog: InferenceWatchdog(window)}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	inf := &inference.Client{BaseURL: s.URL()}
	gen := func(ctx context.Context) error {
		_, err := inf.Generate(ctx, inference.GenerateRequest{InputIDs: []int{1, 2, 3}, SamplingParams: inference.SamplingParams{MaxNewTokens: 4}})
		return err
	}
	// A serving server is left alone through two windows of probes.
	time.Sleep(2 * window)
	if s.Restarts() != 0 || s.Watchdog.Hangs() != 0 {
		t.Fatalf("a serving server was restarted %d times (%d hangs)", s.Restarts(), s.Watchdog.Hangs())
	}
	if err := os.WriteFile(hang, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	gctx, gcancel := context.WithTimeout(context.Background(), 3*window)
	defer gcancel()
	if err := gen(gctx); err == nil {
		t.Fatal("the generation that hung answered")
	}
	found := time.Since(start)
	if _, err := os.Stat(hang); !os.IsNotExist(err) {
		t.Fatal("the server never hung")
	}
	if s.Watchdog.Hangs() != 1 || found > window*3/2+2*time.Second {
		t.Fatalf("the hang was found after %s (window %s, %d hangs)", found, window, s.Watchdog.Hangs())
	}
	ctx := context.Background()
	if err := s.WaitRestarted(ctx, 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := gen(ctx); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	t.Logf("hang found and the server killed after %s; serving again after %s", found.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}
