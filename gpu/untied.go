package gpu

// Stock vLLM on CPU packs every linear layer's weight for its GEMM kernel
// (oneDNN) when the layer's weights are loaded (process_weights_after_loading).
// A model whose LM head is tied to its input embedding (SmolLM2) shares one
// weight between the two, but the head's packed copy is made once, at launch:
// reload_weights re-processes the layers whose weights it loaded, and a tied
// model never loads lm_head.weight. After a reload such an engine samples
// through the launch weights' head on the new body: on SmolLM2 after SFT its
// log-probs were 0.1-0.4 off the trainer's, and exactly what the new body with
// the old head gives. So on a CPU slot vLLM serves a tied checkpoint untied:
// launched with --hf-overrides tie_word_embeddings=false on a view of the
// model whose lm_head.safetensors holds the embedding as lm_head.weight, and
// every checkpoint it reloads carries the same file (servingCheckpoint).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/safetensors"
)

// UntiedHeadFile is the file that carries the LM head of a tied checkpoint.
const UntiedHeadFile = "lm_head.safetensors"

// untieOverride is vLLM's flag that loads a tied model with its own head.
var untieOverride = []string{"--hf-overrides", `{"tie_word_embeddings": false}`}

// tiedEmbeddings reports whether dir's config.json ties the LM head to the
// input embedding (tie_word_embeddings true; absent counts as untied, the
// default of the Llama family's configs).
func tiedEmbeddings(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return false, err
	}
	var c struct {
		Tie *bool `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	return c.Tie != nil && *c.Tie, nil
}

// writeUntiedHead writes dst/lm_head.safetensors: the input embedding of the
// checkpoint in src (its *embed_tokens.weight tensor) as lm_head.weight. When
// dst holds a safetensors index it is rewritten to name the head's file (an
// engine loads only the files an index names); a hard-linked index is
// replaced, never written through.
func writeUntiedHead(src, dst string) error {
	name, file, err := embeddingTensor(src)
	if err != nil {
		return err
	}
	t, err := safetensors.ReadTensor(file, name)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dst, UntiedHeadFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := safetensors.Write(f, map[string]safetensors.Tensor{"lm_head.weight": t}, map[string]string{"format": "pt"}); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dst, UntiedHeadFile)); err != nil {
		return err
	}
	idx := filepath.Join(dst, "model.safetensors.index.json")
	b, err := os.ReadFile(idx)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", idx, err)
	}
	wm, _ := m["weight_map"].(map[string]any)
	if wm == nil {
		return fmt.Errorf("%s: no weight_map", idx)
	}
	wm["lm_head.weight"] = UntiedHeadFile
	out, err := json.Marshal(m)
	if err != nil {
		return err
	}
	os.Remove(idx) // a hard link to the checkpoint's own index: write a new file
	return os.WriteFile(idx, out, 0o644)
}

// embeddingTensor finds the input embedding's tensor name and file in dir
// (through its index when it has one).
func embeddingTensor(dir string) (name, file string, err error) {
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return "", "", fmt.Errorf("%s: %w", filepath.Join(dir, "model.safetensors.index.json"), err)
		}
		for n, f := range idx.WeightMap {
			if strings.HasSuffix(n, "embed_tokens.weight") {
				return n, filepath.Join(dir, f), nil
			}
		}
		return "", "", fmt.Errorf("%s: tied embeddings, but its index names no *embed_tokens.weight tensor", dir)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	sort.Strings(files)
	for _, f := range files {
		if filepath.Base(f) == UntiedHeadFile || strings.HasPrefix(filepath.Base(f), "critic") {
			continue
		}
		h, _, err := safetensors.Header(f)
		if err != nil {
			return "", "", err
		}
		for n := range h {
			if strings.HasSuffix(n, "embed_tokens.weight") {
				return n, f, nil
			}
		}
	}
	return "", "", fmt.Errorf("%s: tied embeddings, but no *embed_tokens.weight tensor in its safetensors files", dir)
}

// linkView makes dst a directory of the files of src that keep accepts,
// hard-linked (copied across file systems), with lm_head.safetensors beside
// them when untie (writeUntiedHead); it is built aside and renamed into
// place, so an engine never reads a half-made one.
func linkView(src, dst string, keep func(name string) bool, untie bool) error {
	tmp := dst + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() || !keep(e.Name()) {
			continue
		}
		if err := linkOrCopy(filepath.Join(src, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	if untie {
		if err := writeUntiedHead(src, tmp); err != nil {
			return err
		}
	}
	os.RemoveAll(dst)
	return os.Rename(tmp, dst)
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// vllmOnCPU says whether the local engine is stock vLLM on a CPU slot, the
// one that serves tied checkpoints untied and is probed at vllmCPUProbeTol.
func vllmOnCPU(engine string, slot Slot) bool {
	kind, err := inference.ParseEngineKind(engine)
	return err == nil && kind == inference.EngineVLLM && slot.Device() == "cpu"
}
