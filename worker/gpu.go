package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/worker/roles"
)

// gpuFlags configure the gpu role: the supervised trainer and, as the local
// default, the inference server, of one backend (reference or hf).
type gpuFlags struct {
	gpus       string
	perProcess int
	backend    string
	model      string
	init       string
	inference  string
	serverArgs string
	trainer    string
	// trainerArgs: extra arguments for the reference trainer (tests widen
	// crash windows with --slow-ms); stallWindow: how long a trainer
	// operation's progress may stand still before the trainer is restarted.
	trainerArgs string
	// trainerRanks > 0: the hf trainer as that many ranks under torchrun;
	// trainerLaunch: torchrun's rendezvous arguments (several hosts).
	trainerRanks  int
	trainerLaunch string
	stallWindow   time.Duration
	hangWindow    time.Duration // the inference server's watchdog
	// engine is the policy inference engine's kind (-inference-engine), for
	// the gpu role's server and the rollouts' clients; modelFiles is the URL
	// of the policy's model-files sidecar (config.json, chat template and
	// tokenizer of the served checkpoint) for this worker's sandbox role;
	// empty: the gpu role's own sidecar, if it runs one.
	engine     string
	modelFiles string
}

func (g *gpuFlags) register() {
	flag.StringVar(&g.engine, "inference-engine", inference.EngineKindFromEnv(), "policy inference engine: t1flow (gpu/reference, gpu/hf servers), sglang or vllm as they ship (env "+inference.EngineEnv+")")
	flag.StringVar(&g.gpus, "gpus", os.Getenv("T1FLOW_GPUS"), "GPU indices for this worker's processes (e.g. 0,1), 'cpu', or empty to ask nvidia-smi")
	flag.IntVar(&g.perProcess, "gpus-per-process", 1, "devices per trainer or inference process")
	flag.StringVar(&g.backend, "gpu-backend", envOr("T1FLOW_GPU_BACKEND", gpu.BackendReference), "trainer and inference backend: reference (gpu/reference) or hf (gpu/hf: a Hugging Face MoE checkpoint, needs -model and `make hfenv`)")
	flag.StringVar(&g.model, "model", os.Getenv("T1FLOW_MODEL"), "model directory both processes start from: with -gpu-backend hf a Hugging Face checkpoint (config.json, weights, tokenizer); with the reference the same as -init")
	flag.StringVar(&g.init, "init", "random", "initial checkpoint directory for the trainer and inference server, or 'random' (reference backend; see -model)")
	flag.StringVar(&g.inference, "inference", os.Getenv("T1FLOW_INFERENCE"), "URL of an existing SGLang-compatible server; empty starts the reference server")
	flag.StringVar(&g.trainer, "trainer", "", "name of this worker's trainer (its own queue is t1flow-gpu-<name>; default: the -host name); unique per trainer")
	flag.StringVar(&g.serverArgs, "inference-args", "", "extra arguments for the reference inference server (e.g. '--sample-dtype bfloat16')")
	flag.StringVar(&g.trainerArgs, "trainer-args", "", "extra arguments for the trainer (e.g. '--threads 4')")
	flag.IntVar(&g.trainerRanks, "trainer-ranks", 0,
		"run the hf trainer as N ranks under torchrun, sharded with FSDP2 (one GPU each: -gpus-per-process N; T1FLOW_TRAINER_RANKS); 0: one process")
	flag.StringVar(&g.trainerLaunch, "trainer-torchrun-args", os.Getenv("T1FLOW_TRAINER_TORCHRUN_ARGS"),
		"torchrun's rendezvous arguments for -trainer-ranks (default --standalone; several hosts: '--nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint HOST:29400 --rdzv-id t1flow')")
	flag.DurationVar(&g.stallWindow, "trainer-stall-window", gpu.DefaultStallWindow,
		"a trainer operation whose progress does not move for this long is hung and the trainer is restarted; raise it when a commit or a minibatch takes longer")
	flag.DurationVar(&g.hangWindow, "inference-hang-window", gpu.DefaultInferenceHangWindow,
		"the inference server is restarted once it has not answered GET /health_generate for this long (found within 1.5x it; 0: never)")
	flag.StringVar(&g.modelFiles, "model-files", os.Getenv("T1FLOW_MODEL_FILES"), "sandbox: URL of the policy's model-files sidecar (gpu/hf/modelfiles.py; a gpu worker of the hf backend runs one and publishes it at <home>/modelfiles.url): the chat template and tokenizer come from the checkpoint's own files; empty: this process's gpu role's sidecar, else the inference server's /get_model_info chat and /tokenize")
}

// start runs the gpu role; the sandbox role's acts take its model-files
// sidecar unless -model-files named one.
func (g *gpuFlags) start(ctx context.Context, c client.Client, st store.Store, host string, acts *activities.Activities) ([]worker.Worker, func(), error) {
	if g.stallWindow <= 0 {
		return nil, nil, fmt.Errorf("-trainer-stall-window = %s must be positive", g.stallWindow)
	}
	slots, err := gpu.Slots(g.gpus, g.perProcess)
	if err != nil {
		return nil, nil, err
	}
	init, err := g.initDir()
	if err != nil {
		return nil, nil, err
	}
	ranks, err := g.ranks()
	if err != nil {
		return nil, nil, err
	}
	home, _ := filepath.Abs(config.Home())
	l, err := gpu.StartLocal(ctx, gpu.LocalOptions{Home: home, Slots: slots, Backend: g.backend, Init: init, Inference: g.inference, InferenceEngine: g.engine,
		ServerArgs: strings.Fields(g.serverArgs), TrainerArgs: strings.Fields(g.trainerArgs),
		TrainerRanks: ranks, TrainerLaunch: strings.Fields(g.trainerLaunch),
		InferenceHangWindow: g.hangWindow, Store: st})
	if err != nil {
		return nil, nil, err
	}
	l.Acts.Name = g.trainer
	if l.ModelFiles != nil && acts.ModelFiles == "" {
		acts.ModelFiles = l.ModelFiles.URL()
	}
	l.Acts.StallWindow = g.stallWindow
	if l.Acts.Name == "" {
		l.Acts.Name = host
	}
	fmt.Fprintf(os.Stderr, "worker: %s trainer %s (queue %s) on %s (%s, log %s, model %s); inference %s\n", l.Backend.Name, l.Acts.Name, ids.TrainerQueue(l.Acts.Name), l.Trainer.URL(), slots[0], l.Trainer.LogPath, init, l.Acts.Inference.BaseURL)
	return roles.NewGPU(c, l.Acts), l.Stop, nil
}

// initDir is the model both processes start from: -model, which -init may
// only repeat; -init alone for the reference backend.
func (g *gpuFlags) initDir() (string, error) {
	if g.model == "" {
		if g.backend == gpu.BackendHF {
			return "", fmt.Errorf("-gpu-backend hf needs -model DIR (or T1FLOW_MODEL): a Hugging Face checkpoint directory with config.json")
		}
		return g.init, nil
	}
	if g.init != "random" && g.init != "" && g.init != g.model {
		return "", fmt.Errorf("-init %s and -model %s name different models: give one", g.init, g.model)
	}
	return filepath.Abs(g.model)
}

// ranks is -trainer-ranks, else T1FLOW_TRAINER_RANKS.
func (g *gpuFlags) ranks() (int, error) {
	v := os.Getenv("T1FLOW_TRAINER_RANKS")
	if g.trainerRanks != 0 || v == "" {
		return g.trainerRanks, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("T1FLOW_TRAINER_RANKS = %q: not a number of trainer ranks (e.g. 8; 0 for one process)", v)
	}
	return n, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
