package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
}

func (g *gpuFlags) register() {
	flag.StringVar(&g.gpus, "gpus", os.Getenv("T1FLOW_GPUS"), "GPU indices for this worker's processes (e.g. 0,1), 'cpu', or empty to ask nvidia-smi")
	flag.IntVar(&g.perProcess, "gpus-per-process", 1, "devices per trainer or inference process")
	flag.StringVar(&g.init, "init", "random", "initial checkpoint directory for the trainer and inference server, or 'random'")
	flag.StringVar(&g.inference, "inference", os.Getenv("T1FLOW_INFERENCE"), "URL of an existing SGLang-compatible server; empty starts the reference server")
	flag.StringVar(&g.trainer, "trainer", "", "name of this worker's trainer (its own queue is t1flow-gpu-<name>; default: the -host name); unique per trainer")
	flag.StringVar(&g.serverArgs, "inference-args", "", "extra arguments for the reference inference server (e.g. '--sample-dtype bfloat16')")
}

func (g *gpuFlags) start(ctx context.Context, c client.Client, st store.Store, host string) ([]worker.Worker, func(), error) {
	slots, err := gpu.Slots(g.gpus, g.perProcess)
	if err != nil {
		return nil, nil, err
	}
	home, _ := filepath.Abs(config.Home())
	l, err := gpu.StartLocal(ctx, gpu.LocalOptions{Home: home, Slots: slots, Init: g.init, Inference: g.inference,
		ServerArgs: strings.Fields(g.serverArgs), Store: st})
	if err != nil {
		return nil, nil, err
	}
	l.Acts.Name = g.trainer
	if l.Acts.Name == "" {
		l.Acts.Name = host
	}
	fmt.Fprintf(os.Stderr, "worker: trainer %s (queue %s) on %s (%s, log %s); inference %s\n", l.Acts.Name, ids.TrainerQueue(l.Acts.Name), l.Trainer.URL(), slots[0], l.Trainer.LogPath, l.Acts.Inference.BaseURL)
	return roles.NewGPU(c, l.Acts), l.Stop, nil
}
