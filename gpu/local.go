package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/store"
)

// LocalOptions configure the local default: a supervised trainer and,
// unless URLs are given, a supervised inference server, of one backend.
type LocalOptions struct {
	Home  string // state: <home>/gpu, logs in <home>/logs
	Slots []Slot // the trainer takes the first, inference the last
	// Backend is "reference" (the default when empty) or "hf".
	Backend string
	// Init is the model both processes start from: a checkpoint dir (the
	// hf backend: a Hugging Face checkpoint dir, required), or "" / "random".
	Init      string
	Inference string // an existing server's URL; empty starts the reference server
	// InferenceEngine is the kind of that server (inference.EngineT1flow,
	// EngineSGLang, EngineVLLM; empty: t1flow).
	InferenceEngine string
	ServerArgs      []string
	// TrainerArgs: extra arguments for the trainer.
	TrainerArgs []string
	// TrainerRanks > 0: the hf trainer as that many ranks under torchrun
	// (Backend.Sharded); TrainerLaunch: torchrun's rendezvous arguments.
	TrainerRanks  int
	TrainerLaunch []string
	// InferenceHangWindow: the inference server is restarted once it has
	// not answered its watchdog for this long (0: no watchdog).
	InferenceHangWindow time.Duration
	Store               store.Store
}

// Local is the running local default.
type Local struct {
	Backend   Backend
	Trainer   *Supervisor
	Inference *Supervisor // nil when an existing server was named
	// ModelFiles is the hf backend's model-files sidecar (nil for the reference).
	ModelFiles *Supervisor
	Acts       *Activities
}

// StartLocal starts the trainer and inference processes and returns the
// activities that drive them.
func StartLocal(ctx context.Context, o LocalOptions) (*Local, error) {
	if len(o.Slots) == 0 {
		o.Slots = []Slot{{}}
	}
	work := filepath.Join(o.Home, "gpu")
	trainerSlot, infSlot := o.Slots[0], o.Slots[len(o.Slots)-1]
	b, err := NewBackend(o.Backend)
	if err != nil {
		return nil, err
	}
	if err := b.CheckModel(o.Init); err != nil {
		return nil, err
	}
	if b, err = b.Sharded(o.TrainerRanks, o.TrainerLaunch, trainerSlot); err != nil {
		return nil, err
	}
	if err := claimHome(work, b.Name); err != nil {
		return nil, err
	}
	l := &Local{Backend: b, Trainer: &Supervisor{
		Name: "trainer", PortFile: filepath.Join(work, "trainer.port"), Command: b.TrainerCommand(filepath.Join(work, "trainer"), trainerSlot, o.Init, o.TrainerArgs...),
		Env: b.Env(trainerSlot), LogPath: filepath.Join(o.Home, "logs", "trainer.log"), PIDFile: filepath.Join(work, "trainer.pid"),
	}}
	if b.Name == BackendHF {
		l.Trainer.HealthTimeout = hfLoadTimeout
	}
	if err := l.Trainer.Start(ctx); err != nil {
		hint := "it needs PyTorch: apt-get install python3-torch libopenblas0-pthread"
		if b.Name == BackendHF {
			hint = "rebuild its environment with `make hfenv`"
		}
		return nil, fmt.Errorf("%s trainer: %w (python: %s; %s)", b.Name, err, b.Python, hint)
	}
	url := o.Inference
	untieHead, probeTol := false, 0.0
	if url == "" {
		// The server records what it serves, and keeps its port: a worker
		// restarted after a crash brings back the same URL serving the same
		// weights, so a campaign's rollouts go on sampling the version it expects.
		model, args, untie, err := engineModel(o, work, infSlot)
		if err != nil {
			l.Trainer.Stop()
			return nil, err
		}
		untieHead = untie
		if vllmOnCPU(o.InferenceEngine, infSlot) {
			probeTol = vllmCPUProbeTol
		}
		cmd, env, err := b.EngineCommand(o.InferenceEngine, model, infSlot, filepath.Join(work, "inference.served.json"), args...)
		if err != nil {
			l.Trainer.Stop()
			return nil, err
		}
		l.Inference = &Supervisor{
			Name: "inference", PortFile: filepath.Join(work, "inference.port"), Command: cmd,
			Env: env, LogPath: filepath.Join(o.Home, "logs", "inference.log"), PIDFile: filepath.Join(work, "inference.pid"),
		}
		if b.Name == BackendHF {
			l.Inference.HealthTimeout = hfLoadTimeout
		}
		if o.InferenceHangWindow > 0 {
			l.Inference.Watchdog = EngineWatchdog(o.InferenceEngine, o.InferenceHangWindow)
		}
		if err := l.Inference.Start(ctx); err != nil {
			l.Trainer.Stop()
			return nil, fmt.Errorf("%s inference server: %w", b.Name, err)
		}
		url = l.Inference.URL()
	}
	os.WriteFile(filepath.Join(o.Home, "inference.url"), []byte(url+"\n"), 0o644)
	eng, err := inference.NewEngine(o.InferenceEngine, url, nil)
	if err != nil {
		l.Stop()
		return nil, err
	}
	if err := checkLaunchFlags(ctx, eng, b.Name, o.Init); err != nil {
		l.Stop()
		return nil, err
	}
	if b.Name == BackendHF {
		if l.ModelFiles, err = StartModelFiles(ctx, o.Home, work, o.Init); err != nil {
			l.Stop()
			return nil, err
		}
	}
	l.Acts = &Activities{Trainer: NewClient(l.Trainer.URL()), Inference: &inference.Client{BaseURL: url}, Engine: eng, Store: o.Store, WorkDir: work,
		RestartTrainer: l.Trainer.Kill}
	if b.Name == BackendHF {
		l.Acts.Model = o.Init
	}
	l.Acts.UntieHead, l.Acts.ProbeTolerance = untieHead, probeTol
	return l, nil
}

// vllmCPUProbeTol is the reload probe's tolerance for the stock vLLM this
// worker starts on a CPU slot (float32, VLLMCommand; vLLM does not report
// its dtype, which would give 0.1): its log-probs were within 5e-4 of the
// hf trainer's on SmolLM2 after SFT, and gpu/hf/tests/test_vllm.py holds
// them to 2e-3, while a reload that left the LM head stale (untied.go) was
// 0.1-0.4 off.
const vllmCPUProbeTol = 2e-3

// engineModel is the model directory and extra arguments the local engine
// starts with: stock vLLM on a CPU slot loads a tied checkpoint untied
// (untied.go), from a view of it under work; every other engine o.Init.
func engineModel(o LocalOptions, work string, slot Slot) (string, []string, bool, error) {
	if !vllmOnCPU(o.InferenceEngine, slot) || o.Init == "" || o.Init == "random" {
		return o.Init, o.ServerArgs, false, nil
	}
	tied, err := tiedEmbeddings(o.Init)
	if err != nil || !tied {
		return o.Init, o.ServerArgs, false, nil // EngineCommand and the engine report a bad model
	}
	view := filepath.Join(work, "vllm-model")
	if err := linkView(o.Init, view, func(string) bool { return true }, true); err != nil {
		return "", nil, false, fmt.Errorf("vllm: an untied view of %s (its LM head is tied to the embedding): %w", o.Init, err)
	}
	return view, append(append([]string{}, untieOverride...), o.ServerArgs...), true, nil
}

// Stop ends the processes.
func (l *Local) Stop() {
	if l.ModelFiles != nil {
		l.ModelFiles.Stop()
	}
	if l.Inference != nil {
		l.Inference.Stop()
	}
	l.Trainer.Stop()
}

// hfLoadTimeout bounds a Hugging Face checkpoint's load at start (the
// reference's small model loads in seconds).
const hfLoadTimeout = 15 * time.Minute

// claimHome records which backend keeps its state in work: the trainer's
// committed state (and the server's record of what it served) are the
// backend's own format, so another backend must not pick them up.
func claimHome(work, backend string) error {
	f := filepath.Join(work, "backend")
	held := ""
	if b, err := os.ReadFile(f); err == nil {
		held = strings.TrimSpace(string(b))
	} else if _, err := os.Stat(filepath.Join(work, "trainer")); err == nil {
		held = BackendReference // state from before backends were recorded
	}
	if held != "" && held != backend {
		return fmt.Errorf("%s holds the state of gpu backend %s, not %s: use another T1FLOW_HOME for the %s backend (or remove %s to start over)", work, held, backend, backend, work)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	return os.WriteFile(f, []byte(backend+"\n"), 0o644)
}

// checkLaunchFlags refuses an engine launched without routed-experts
// capture when the policy is an MoE (R3 on): the reference model always is;
// an hf checkpoint is when its config.json has experts.
func checkLaunchFlags(ctx context.Context, e inference.Engine, backend, init string) error {
	r3 := backend != BackendHF
	if p := filepath.Join(init, "config.json"); init != "" && backend == BackendHF {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("-model %s: %w", init, err)
		}
		f, err := inference.FactsFromConfig(p, b)
		if err != nil {
			return err
		}
		r3 = f.MoE()
	}
	info, err := e.Info(ctx)
	if err != nil {
		return fmt.Errorf("inference %s at %s: %w", e.Kind(), e.URL(), err)
	}
	return inference.CheckLaunchFlags(e.Kind(), info, r3)
}
