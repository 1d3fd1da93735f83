package gpu

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestHFBackendNeedsItsEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv("T1FLOW_HOME", home)
	if _, err := NewBackend(BackendHF); err == nil || !strings.Contains(err.Error(), "make hfenv") || !strings.Contains(err.Error(), filepath.Join(home, "hfenv", "bin", "python")) {
		t.Fatalf("no hfenv: %v, want an error naming the interpreter and `make hfenv`", err)
	}
	py := filepath.Join(home, "hfenv", "bin", "python")
	os.MkdirAll(filepath.Dir(py), 0o755)
	os.WriteFile(py, nil, 0o755)
	b, err := NewBackend(BackendHF)
	if err != nil || b.Python != py || filepath.Base(b.Dir) != "hf" {
		t.Fatalf("%+v %v", b, err)
	}
	if _, err := NewBackend("sglang"); err == nil || !strings.Contains(err.Error(), "reference or hf") {
		t.Fatalf("unknown backend: %v", err)
	}
	// The same error stops StartLocal before anything starts.
	t.Setenv("T1FLOW_HOME", t.TempDir())
	if _, err := StartLocal(context.Background(), LocalOptions{Home: t.TempDir(), Backend: BackendHF, Init: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "make hfenv") {
		t.Fatalf("StartLocal without hfenv: %v", err)
	}
}

func TestHFBackendNeedsAHFCheckpoint(t *testing.T) {
	b := Backend{Name: BackendHF}
	dir := t.TempDir()
	file := filepath.Join(dir, "weights.safetensors")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ model, want string }{
		{"", "needs -model DIR"}, {"random", "needs -model DIR"},
		{filepath.Join(dir, "nope"), "no such file"}, {file, "not a directory"}, {dir, "no config.json"},
	} {
		if err := b.CheckModel(c.model); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("-model %q: %v, want %q", c.model, err, c.want)
		}
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	if err := b.CheckModel(dir); err != nil {
		t.Fatal(err)
	}
	if err := Reference().CheckModel("random"); err != nil {
		t.Fatal(err)
	}
}

// The hf processes get the reference's flags, plus --model / --init DIR.
func TestBackendCommands(t *testing.T) {
	b := Backend{Name: BackendHF, Python: "/h/hfenv/bin/python", Dir: "/src/gpu/hf"}
	tr := b.TrainerCommand("/w/trainer", Slot{Devices: []int{0}}, "/m")
	if want := []string{"/h/hfenv/bin/python", "/src/gpu/hf/trainer.py", "--port", "{port}", "--workdir", "/w/trainer", "--device", "cuda", "--init", "/m"}; !reflect.DeepEqual(tr, want) {
		t.Errorf("trainer %v", tr)
	}
	inf := b.InferenceCommand("/m", Slot{}, "--state", "s.json")
	if want := []string{"/h/hfenv/bin/python", "/src/gpu/hf/server.py", "--port", "{port}", "--device", "cpu", "--model", "/m", "--state", "s.json"}; !reflect.DeepEqual(inf, want) {
		t.Errorf("inference %v", inf)
	}
	if env := b.Env(Slot{Devices: []int{1}}); strings.Join(env, " ") != "CUDA_VISIBLE_DEVICES=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" {
		t.Errorf("hf env %v", env)
	}
	if env := Reference().Env(Slot{}); len(env) != 1 {
		t.Errorf("reference env %v", env)
	}
	if ref := TrainerCommand("/w", Slot{}); strings.Contains(strings.Join(ref, " "), "--init") || filepath.Base(ref[1]) != "trainer.py" {
		t.Errorf("reference trainer %v", ref)
	}
}

// One home's trainer state belongs to one backend.
func TestClaimHome(t *testing.T) {
	work := t.TempDir()
	if err := claimHome(work, BackendHF); err != nil {
		t.Fatal(err)
	}
	if err := claimHome(work, BackendHF); err != nil {
		t.Fatal(err)
	}
	if err := claimHome(work, BackendReference); err == nil || !strings.Contains(err.Error(), "state of gpu backend hf") {
		t.Fatalf("reference on an hf home: %v", err)
	}
	old := t.TempDir()
	os.MkdirAll(filepath.Join(old, "trainer"), 0o755) // a reference home from before backends were recorded
	if err := claimHome(old, BackendHF); err == nil || !strings.Contains(err.Error(), "state of gpu backend reference") {
		t.Fatalf("hf on an old reference home: %v", err)
	}
}

// -trainer-ranks: the hf trainer under the venv's torchrun, one rank per GPU of its slot.
func TestShardedTrainerCommand(t *testing.T) {
	b := Backend{Name: BackendHF, Python: "/h/hfenv/bin/python", Dir: "/src/gpu/hf"}
	two := Slot{Devices: []int{2, 3}}
	s, err := b.Sharded(2, nil, two)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/h/hfenv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
		"/src/gpu/hf/trainer.py", "--port", "{port}", "--workdir", "/w", "--device", "cuda", "--init", "/m"}
	if got := s.TrainerCommand("/w", two, "/m"); !reflect.DeepEqual(got, want) {
		t.Errorf("sharded trainer %v", got)
	}
	launch := []string{"--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29400"}
	s, _ = b.Sharded(4, launch, Slot{})
	if got := strings.Join(s.TrainerCommand("/w", Slot{}, ""), " "); !strings.Contains(got, "torch.distributed.run "+strings.Join(launch, " ")+" --nproc-per-node 4 /src/gpu/hf/trainer.py") || strings.Contains(got, "--standalone") {
		t.Errorf("several hosts: %s", got)
	}
	if one, _ := b.Sharded(0, nil, two); one.Ranks != 0 || one.TrainerCommand("/w", two, "")[1] != "/src/gpu/hf/trainer.py" {
		t.Errorf("0 ranks is one process without torchrun")
	}
	for _, c := range []struct {
		b     Backend
		ranks int
		slot  Slot
		want  string
	}{
		{b, 4, two, "-gpus-per-process 4"},
		{b, -1, two, "must be >= 0"},
		{Reference(), 2, Slot{}, "only the hf trainer"},
	} {
		if _, err := c.b.Sharded(c.ranks, nil, c.slot); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Sharded(%d) on %s: %v, want an error with %q", c.ranks, c.b.Name, err, c.want)
		}
	}
}

// -inference-engine picks what the worker starts as its local server: the
// backend's own server (t1flow), stock vLLM for an hf checkpoint, and never
// SGLang (started by its operator, named with -inference).
func TestEngineCommand(t *testing.T) {
	hf := Backend{Name: BackendHF, Python: "/h/hfenv/bin/python", Dir: "/src/gpu/hf"}
	cmd, env, err := hf.EngineCommand("", "/m", Slot{}, "s.json")
	if err != nil || !reflect.DeepEqual(cmd, hf.InferenceCommand("/m", Slot{}, "--state", "s.json")) || !reflect.DeepEqual(env, hf.Env(Slot{})) {
		t.Fatalf("t1flow: %v %v %v", cmd, env, err)
	}
	t.Setenv("T1FLOW_HF_PYTHON", "/h/hfenv/bin/python")
	cmd, env, err = hf.EngineCommand("vllm", "/m", Slot{}, "s.json", "--max-model-len", "2048")
	if err != nil || !reflect.DeepEqual(cmd, VLLMCommand("/m", Slot{}, "--max-model-len", "2048")) || !reflect.DeepEqual(env, VLLMEnv(Slot{})) {
		t.Fatalf("vllm: %v %v %v", cmd, env, err)
	}
	if strings.Contains(strings.Join(cmd, " "), "--state") || !strings.Contains(strings.Join(env, " "), "VLLM_SERVER_DEV_MODE=1") {
		t.Errorf("vllm gets t1flow's --state or lacks its dev-mode reload route: %v %v", cmd, env)
	}
	for _, c := range []struct {
		b            Backend
		engine, want string
	}{
		{Reference(), "vllm", "-gpu-backend hf"},
		{hf, "sglang", "-inference"},
		{hf, "tgi", "must be one of"},
	} {
		if _, _, err := c.b.EngineCommand(c.engine, "/m", Slot{}, "s.json"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on %s: %v, want an error with %q", c.engine, c.b.Name, err, c.want)
		}
	}
}

// A supervisor recognizes its own orphan by the program it runs: vLLM runs
// as `python -m vllm.entrypoints.openai.api_server`, where "-m" would match
// any python process holding a recycled PID.
func TestSupervisorProgram(t *testing.T) {
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{VLLMCommand("/m", Slot{}), "vllm.entrypoints.openai.api_server"},
		{[]string{"/p/python", "/src/gpu/hf/server.py", "--port", "{port}"}, "server.py"},
		{[]string{"/bin/versitygw"}, "versitygw"},
	} {
		if got := (&Supervisor{Command: c.cmd}).program(); got != c.want {
			t.Errorf("%v: program %q, want %q", c.cmd, got, c.want)
		}
	}
}
