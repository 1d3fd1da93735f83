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
)

// gpuFlags configure the gpu role: the supervised trainer and, as the local
// default, the reference inference server.
type gpuFlags struct {
	gpus       string
	perProcess int
	init       string
	inference  string
	serverArgs string
}

func (g *gpuFlags) register() {
	flag.StringVar(&g.gpus, "gpus", os.Getenv("T1FLOW_GPUS"), "GPU indices for this worker's processes (e.g. 0,1), 'cpu', or empty to ask nvidia-smi")
	flag.IntVar(&g.perProcess, "gpus-per-process", 1, "devices per trainer or inference process")
	flag.StringVar(&g.init, "init", "random", "initial checkpoint directory for the trainer and inference server, or 'random'")
	flag.StringVar(&g.inference, "inference", os.Getenv("T1FLOW_INFERENCE"), "URL of an existing SGLang-compatible server; empty starts the reference server")
	flag.StringVar(&g.serverArgs, "inference-args", "", "extra arguments for the reference inference server (e.g. '--sample-dtype bfloat16')")
}

func (g *gpuFlags) start(ctx context.Context, c client.Client, st store.Store) (worker.Worker, func(), error) {
	slots, err := gpu.Slots(g.gpus, g.perProcess)
	if err != nil {
		return nil, nil, err
	}
	home, _ := filepath.Abs(config.Home())
	work := filepath.Join(home, "gpu")
	trainerSlot, infSlot := slots[0], slots[len(slots)-1] // disjoint when there are two or more
	var extra []string
	if g.init != "random" {
		extra = []string{"--init", g.init}
	}
	tr := &gpu.Supervisor{
		Name: "trainer", Command: gpu.TrainerCommand(filepath.Join(work, "trainer"), trainerSlot, extra...),
		Env: trainerSlot.Env(), LogPath: filepath.Join(home, "logs", "trainer.log"),
	}
	if err := tr.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("trainer: %w (python: %s; it needs PyTorch: apt-get install python3-torch libopenblas0-pthread)", err, gpu.Python())
	}
	stop := []func(){tr.Stop}
	url := g.inference
	if url == "" {
		model := ""
		if g.init != "random" {
			model = g.init
		}
		inf := &gpu.Supervisor{
			Name: "inference", Command: gpu.InferenceCommand(model, infSlot, strings.Fields(g.serverArgs)...),
			Env: infSlot.Env(), LogPath: filepath.Join(home, "logs", "inference.log"),
		}
		if err := inf.Start(ctx); err != nil {
			tr.Stop()
			return nil, nil, fmt.Errorf("inference server: %w", err)
		}
		stop = append(stop, inf.Stop)
		url = inf.URL()
	}
	// Starters and rollouts on this machine find the local default here.
	os.WriteFile(filepath.Join(home, "inference.url"), []byte(url+"\n"), 0o644)
	fmt.Fprintf(os.Stderr, "worker: trainer on %s (%s, log %s); inference %s\n", tr.URL(), trainerSlot, tr.LogPath, url)

	acts := &gpu.Activities{
		Trainer: gpu.NewClient(tr.URL()), Inference: &gpu.InferenceClient{BaseURL: url},
		Store: st, WorkDir: work,
	}
	w := worker.New(c, ids.GPUQueue, worker.Options{MaxConcurrentActivityExecutionSize: 4})
	w.RegisterActivity(acts)
	return w, func() {
		for _, s := range stop {
			s()
		}
	}, nil
}
