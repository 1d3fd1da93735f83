package gpu

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/t1flow/t1flow/internal/safetensors"
)

func writeST(t *testing.T, path string, ts map[string]safetensors.Tensor) {
	t.Helper()
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readST(t *testing.T, path string) map[string]safetensors.Tensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// A tied checkpoint served to vLLM on CPU gets its embedding as
// lm_head.weight in lm_head.safetensors (the view it launches from and
// every reloaded checkpoint), byte for byte, and a sharded checkpoint's
// index names the file without writing through to the checkpoint's own.
func TestUntiedHeadCarriesTheEmbedding(t *testing.T) {
	emb := safetensors.Float32s([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	other := safetensors.Float32s([]float32{9, 9}, 2)

	// One file, no index.
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"tie_word_embeddings": true}`), 0o644)
	writeST(t, filepath.Join(src, "model.safetensors"), map[string]safetensors.Tensor{"model.embed_tokens.weight": emb, "model.norm.weight": other})
	writeST(t, filepath.Join(src, "critic.safetensors"), map[string]safetensors.Tensor{"backbone.embed_tokens.weight": other})
	if tied, err := tiedEmbeddings(src); err != nil || !tied {
		t.Fatalf("tied: %v %v", tied, err)
	}
	view := filepath.Join(t.TempDir(), "view")
	if err := linkView(src, view, func(string) bool { return true }, true); err != nil {
		t.Fatal(err)
	}
	head := readST(t, filepath.Join(view, UntiedHeadFile))
	if h, ok := head["lm_head.weight"]; !ok || len(head) != 1 || !bytes.Equal(h.Data, emb.Data) || h.DType != "F32" || len(h.Shape) != 2 || h.Shape[0] != 3 {
		t.Fatalf("head %+v", head)
	}
	if _, err := os.Stat(filepath.Join(view, "model.safetensors")); err != nil {
		t.Fatal("the view lacks the model's own files")
	}

	// Sharded, with an index: the head's file is named in a new index.
	sh := t.TempDir()
	os.WriteFile(filepath.Join(sh, "config.json"), []byte(`{"tie_word_embeddings": true}`), 0o644)
	writeST(t, filepath.Join(sh, "model-00001-of-00002.safetensors"), map[string]safetensors.Tensor{"model.norm.weight": other})
	writeST(t, filepath.Join(sh, "model-00002-of-00002.safetensors"), map[string]safetensors.Tensor{"model.embed_tokens.weight": emb})
	index := `{"metadata": {"format": "pt"}, "weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors", "model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(sh, "model.safetensors.index.json"), []byte(index), 0o644)
	serve := t.TempDir()
	if err := os.Link(filepath.Join(sh, "model.safetensors.index.json"), filepath.Join(serve, "model.safetensors.index.json")); err != nil {
		t.Fatal(err)
	}
	if err := writeUntiedHead(sh, serve); err != nil {
		t.Fatal(err)
	}
	if h := readST(t, filepath.Join(serve, UntiedHeadFile))["lm_head.weight"]; !bytes.Equal(h.Data, emb.Data) {
		t.Fatalf("sharded head %v", h.Data)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	b, _ := os.ReadFile(filepath.Join(serve, "model.safetensors.index.json"))
	if err := json.Unmarshal(b, &idx); err != nil || idx.WeightMap["lm_head.weight"] != UntiedHeadFile || len(idx.WeightMap) != 3 {
		t.Fatalf("served index %s %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(sh, "model.safetensors.index.json")); string(b) != index {
		t.Fatalf("the checkpoint's own index was written through: %s", b)
	}

	// Untied or unknown: nothing to do; tied without an embedding: an error naming the directory.
	un := t.TempDir()
	os.WriteFile(filepath.Join(un, "config.json"), []byte(`{"hidden_size": 8}`), 0o644)
	if tied, err := tiedEmbeddings(un); err != nil || tied {
		t.Fatalf("absent tie_word_embeddings: %v %v", tied, err)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(`{"tie_word_embeddings": true}`), 0o644)
	writeST(t, filepath.Join(bad, "model.safetensors"), map[string]safetensors.Tensor{"model.norm.weight": other})
	if err := writeUntiedHead(bad, t.TempDir()); err == nil || !bytes.Contains([]byte(err.Error()), []byte(bad)) {
		t.Fatalf("no embedding: %v", err)
	}
}

// Only stock vLLM on a CPU slot with a tied model launches from the view.
func TestEngineModelUntiesOnlyVLLMOnCPU(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"tie_word_embeddings": true}`), 0o644)
	writeST(t, filepath.Join(src, "model.safetensors"), map[string]safetensors.Tensor{"model.embed_tokens.weight": safetensors.Float32s([]float32{1, 2}, 1, 2)})
	work := t.TempDir()
	cpu := Slot{}
	if cpu.Device() != "cpu" {
		t.Skip("the zero slot is not a CPU slot here")
	}
	m, args, untie, err := engineModel(LocalOptions{Init: src, InferenceEngine: "vllm", ServerArgs: []string{"--x"}}, work, cpu)
	if err != nil || !untie || m != filepath.Join(work, "vllm-model") || len(args) != 3 || args[0] != "--hf-overrides" || args[2] != "--x" {
		t.Fatalf("vllm on cpu: %s %v %v %v", m, args, untie, err)
	}
	if _, err := os.Stat(filepath.Join(m, UntiedHeadFile)); err != nil {
		t.Fatal(err)
	}
	if m, _, untie, _ := engineModel(LocalOptions{Init: src, InferenceEngine: "t1flow"}, work, cpu); untie || m != src {
		t.Fatalf("t1flow engine: %s %v", m, untie)
	}
}
