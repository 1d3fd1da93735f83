package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/t1flow/t1flow/internal/config"
)

// Backends: which trainer and inference server scripts a GPU worker
// supervises. Both speak the same HTTP protocol (docs/trainer-protocol.md).
const (
	BackendReference = "reference" // gpu/reference: the small byte-level MoE, PyTorch from Debian
	BackendHF        = "hf"        // gpu/hf: a Hugging Face MoE checkpoint, in $T1FLOW_HOME/hfenv
)

// Backend is a trainer and inference server pair: an interpreter and the
// directory holding trainer.py and server.py.
type Backend struct {
	Name   string
	Python string
	Dir    string
	// Ranks > 0 runs the hf trainer as that many ranks on this host under
	// torchrun (gpu/hf/sharded.py: FSDP2, rank 0 serves); Launch is
	// torchrun's rendezvous arguments, "--standalone" when empty (one host).
	Ranks  int
	Launch []string
}

// Reference is the reference backend.
func Reference() Backend {
	return Backend{Name: BackendReference, Python: Python(), Dir: ReferenceDir()}
}

// HFPython is the hf backend's interpreter: $T1FLOW_HF_PYTHON, else the
// virtual environment `make hfenv` builds at $T1FLOW_HOME/hfenv.
func HFPython() string {
	if p := os.Getenv("T1FLOW_HF_PYTHON"); p != "" {
		return p
	}
	home, _ := filepath.Abs(config.Home())
	return filepath.Join(home, "hfenv", "bin", "python")
}

// HFDir is gpu/hf in this source tree ($T1FLOW_HF overrides).
func HFDir() string {
	if d := os.Getenv("T1FLOW_HF"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "hf")
}

// NewBackend resolves a backend by name ("" is the reference) and checks
// that it can run: the hf backend needs its virtual environment.
func NewBackend(name string) (Backend, error) {
	switch name {
	case "", BackendReference:
		return Reference(), nil
	case BackendHF:
		py := HFPython()
		if _, err := os.Stat(py); err != nil {
			return Backend{}, fmt.Errorf("gpu backend hf: %s is missing: build the hf environment with `make hfenv` (scripts/ensure-hf-env.sh)", py)
		}
		return Backend{Name: BackendHF, Python: py, Dir: HFDir()}, nil
	}
	return Backend{}, fmt.Errorf("gpu backend %q: must be %s or %s", name, BackendReference, BackendHF)
}

// CheckModel checks the model a backend starts from: the hf backend needs a
// Hugging Face checkpoint directory (config.json and weights); the
// reference takes its own checkpoint directory, or "" / "random".
func (b Backend) CheckModel(dir string) error {
	if b.Name != BackendHF {
		return nil
	}
	if dir == "" || dir == "random" {
		return fmt.Errorf("gpu backend hf needs -model DIR (T1FLOW_MODEL): a Hugging Face checkpoint directory with config.json")
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("-model %s: %v", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("-model %s: not a directory (a Hugging Face checkpoint directory with config.json)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("-model %s: no config.json: not a Hugging Face checkpoint directory", dir)
	}
	return nil
}

// Sharded is the backend with its trainer run as ranks ranks under
// torchrun (launch: torchrun's rendezvous arguments, e.g. for several hosts
// "--nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint host0:29400
// --rdzv-id t1flow"). Only the hf trainer shards; on GPUs each rank takes
// one of the slot's devices.
func (b Backend) Sharded(ranks int, launch []string, slot Slot) (Backend, error) {
	if ranks < 0 {
		return b, fmt.Errorf("-trainer-ranks %d must be >= 0 (0: one trainer process without torchrun)", ranks)
	}
	if ranks == 0 {
		return b, nil
	}
	if b.Name != BackendHF {
		return b, fmt.Errorf("-trainer-ranks %d: only the hf trainer (-gpu-backend hf) runs sharded under torchrun", ranks)
	}
	if n := len(slot.Devices); n > 0 && n != ranks {
		return b, fmt.Errorf("-trainer-ranks %d: the trainer's slot has %d GPUs (%s); give it one per rank with -gpus-per-process %d", ranks, n, slot, ranks)
	}
	b.Ranks, b.Launch = ranks, launch
	return b, nil
}

// TrainerCommand runs the backend's trainer with its state in workdir; the
// hf trainer starts from init (its committed state, once there is one,
// overrides init on a restart, as the reference's does). With Ranks, the
// hf venv's torchrun starts the ranks; they die with it (each rank sets its
// parent-death signal: torchrun gives them sessions of their own), so the
// supervisor's kill or restart takes the whole group.
func (b Backend) TrainerCommand(workdir string, slot Slot, init string, extra ...string) []string {
	args := []string{b.Python, filepath.Join(b.Dir, "trainer.py")}
	if b.Ranks > 0 {
		launch := b.Launch
		if len(launch) == 0 {
			launch = []string{"--standalone"}
		}
		args = append(append([]string{b.Python, "-m", "torch.distributed.run"}, launch...),
			"--nproc-per-node", fmt.Sprint(b.Ranks), filepath.Join(b.Dir, "trainer.py"))
	}
	args = append(args, "--port", "{port}", "--workdir", workdir, "--device", slot.Device())
	if init != "" && init != "random" {
		args = append(args, "--init", init)
	}
	return append(args, extra...)
}

// InferenceCommand runs the backend's inference server; model "" (reference
// only) is a seeded random init.
func (b Backend) InferenceCommand(model string, slot Slot, extra ...string) []string {
	args := []string{b.Python, filepath.Join(b.Dir, "server.py"), "--port", "{port}", "--device", slot.Device()}
	if model != "" && model != "random" {
		args = append(args, "--model", model)
	}
	return append(args, extra...)
}

// Env is a process's extra environment: its devices, and for the hf
// backend no Hugging Face Hub (the model is a local directory; nothing is
// downloaded behind the operator's back).
func (b Backend) Env(slot Slot) []string {
	env := slot.Env()
	if b.Name == BackendHF {
		env = append(env, "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
	}
	return env
}
