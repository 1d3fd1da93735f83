package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/store"
)

// LocalOptions configure the local default: a supervised reference trainer
// and, unless URLs are given, a supervised reference inference server.
type LocalOptions struct {
	Home       string // state: <home>/gpu, logs in <home>/logs
	Slots      []Slot // the trainer takes the first, inference the last
	Init       string // checkpoint dir, or "" / "random"
	Inference  string // an existing server's URL; empty starts the reference server
	ServerArgs []string
	// TrainerArgs: extra arguments for the reference trainer.
	TrainerArgs []string
	// InferenceHangWindow: the reference inference server is restarted once
	// it has not answered its watchdog for this long (0: no watchdog).
	InferenceHangWindow time.Duration
	Store               store.Store
}

// Local is the running local default.
type Local struct {
	Trainer   *Supervisor
	Inference *Supervisor // nil when an existing server was named
	Acts      *Activities
}

// StartLocal starts the trainer and inference processes and returns the
// activities that drive them.
func StartLocal(ctx context.Context, o LocalOptions) (*Local, error) {
	if len(o.Slots) == 0 {
		o.Slots = []Slot{{}}
	}
	work := filepath.Join(o.Home, "gpu")
	trainerSlot, infSlot := o.Slots[0], o.Slots[len(o.Slots)-1]
	extra := o.TrainerArgs
	model := ""
	if o.Init != "" && o.Init != "random" {
		extra, model = append([]string{"--init", o.Init}, o.TrainerArgs...), o.Init
	}
	l := &Local{Trainer: &Supervisor{
		Name: "trainer", PortFile: filepath.Join(work, "trainer.port"), Command: TrainerCommand(filepath.Join(work, "trainer"), trainerSlot, extra...),
		Env: trainerSlot.Env(), LogPath: filepath.Join(o.Home, "logs", "trainer.log"), PIDFile: filepath.Join(work, "trainer.pid"),
	}}
	if err := l.Trainer.Start(ctx); err != nil {
		return nil, fmt.Errorf("trainer: %w (python: %s; it needs PyTorch: apt-get install python3-torch libopenblas0-pthread)", err, Python())
	}
	url := o.Inference
	if url == "" {
		// The server records what it serves, and keeps its port: a worker
		// restarted after a crash brings back the same URL serving the same
		// weights, so a campaign's rollouts go on sampling the version it expects.
		args := append([]string{"--state", filepath.Join(work, "inference.served.json")}, o.ServerArgs...)
		l.Inference = &Supervisor{
			Name: "inference", PortFile: filepath.Join(work, "inference.port"), Command: InferenceCommand(model, infSlot, args...),
			Env: infSlot.Env(), LogPath: filepath.Join(o.Home, "logs", "inference.log"), PIDFile: filepath.Join(work, "inference.pid"),
		}
		if o.InferenceHangWindow > 0 {
			l.Inference.Watchdog = InferenceWatchdog(o.InferenceHangWindow)
		}
		if err := l.Inference.Start(ctx); err != nil {
			l.Trainer.Stop()
			return nil, fmt.Errorf("inference server: %w", err)
		}
		url = l.Inference.URL()
	}
	os.WriteFile(filepath.Join(o.Home, "inference.url"), []byte(url+"\n"), 0o644)
	l.Acts = &Activities{Trainer: NewClient(l.Trainer.URL()), Inference: &inference.Client{BaseURL: url}, Store: o.Store, WorkDir: work,
		RestartTrainer: l.Trainer.Kill}
	return l, nil
}

// Stop ends the processes.
func (l *Local) Stop() {
	if l.Inference != nil {
		l.Inference.Stop()
	}
	l.Trainer.Stop()
}
