package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/worker/roles"
)

// gpuFlags configure the gpu role: the supervised trainer and, as the local
// default, the reference inference server.
type gpuFlags struct {
	gpus       string
	perProcess int
	init       string
	inference  string
	serverArgs string
	trainer    string
	// trainerArgs: extra arguments for the reference trainer (tests widen
	// crash windows with --slow-ms); stallWindow: how long a trainer
	// operation's progress may stand still before the trainer is restarted.
	trainerArgs string
	stallWindow time.Duration
	hangWindow  time.Duration // the inference server's watchdog
}

func (g *gpuFlags) register() {
	flag.StringVar(&g.gpus, "gpus", os.Getenv("T1FLOW_GPUS"), "GPU indices for this worker's processes (e.g. 0,1), 'cpu', or empty to ask nvidia-smi")
	flag.IntVar(&g.perProcess, "gpus-per-process", 1, "devices per trainer or inference process")
	flag.StringVar(&g.init, "init", "random", "initial checkpoint directory for the trainer and inference server, or 'random'")
	flag.StringVar(&g.inference, "inference", os.Getenv("T1FLOW_INFERENCE"), "URL of an existing SGLang-compatible server; empty starts the reference server")
	flag.StringVar(&g.trainer, "trainer", "", "name of this worker's trainer (its own queue is t1flow-gpu-<name>; default: the -host name); unique per trainer")
	flag.StringVar(&g.serverArgs, "inference-args", "", "extra arguments for the reference inference server (e.g. '--sample-dtype bfloat16')")
	flag.StringVar(&g.trainerArgs, "trainer-args", "", "extra arguments for the reference trainer (e.g. '--threads 4')")
	flag.DurationVar(&g.stallWindow, "trainer-stall-window", gpu.DefaultStallWindow,
		"a trainer operation whose progress does not move for this long is hung and the trainer is restarted; raise it when a commit or a minibatch takes longer")
	flag.DurationVar(&g.hangWindow, "inference-hang-window", gpu.DefaultInferenceHangWindow,
		"the reference inference server is restarted once it has not answered GET /health_generate for this long (found within 1.5x it; 0: never)")
}

func (g *gpuFlags) start(ctx context.Context, c client.Client, st store.Store, host string) ([]worker.Worker, func(), error) {
	if g.stallWindow <= 0 {
		return nil, nil, fmt.Errorf("-trainer-stall-window = %s must be positive", g.stallWindow)
	}
	slots, err := gpu.Slots(g.gpus, g.perProcess)
	if err != nil {
		return nil, nil, err
	}
	home, _ := filepath.Abs(config.Home())
	l, err := gpu.StartLocal(ctx, gpu.LocalOptions{Home: home, Slots: slots, Init: g.init, Inference: g.inference,
		ServerArgs: strings.Fields(g.serverArgs), TrainerArgs: strings.Fields(g.trainerArgs),
		InferenceHangWindow: g.hangWindow, Store: st})
	if err != nil {
		return nil, nil, err
	}
	l.Acts.Name = g.trainer
	l.Acts.StallWindow = g.stallWindow
	if l.Acts.Name == "" {
		l.Acts.Name = host
	}
	fmt.Fprintf(os.Stderr, "worker: trainer %s (queue %s) on %s (%s, log %s); inference %s\n", l.Acts.Name, ids.TrainerQueue(l.Acts.Name), l.Trainer.URL(), slots[0], l.Trainer.LogPath, l.Acts.Inference.BaseURL)
	return roles.NewGPU(c, l.Acts), l.Stop, nil
}
