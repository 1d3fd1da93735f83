package inference

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func span(from, to int) []int {
	out := []int{}
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// The fixtures in testdata/configs are config.json files written from each
// architecture's documented fields (the Hugging Face configs of
// Qwen3-30B-A3B, Mixtral-8x7B, OLMoE-1B-7B-0924, DeepSeek-V2-Lite,
// DeepSeek-V3 and SmolLM2-135M-Instruct, a Llama).
func TestFactsFromRealConfigs(t *testing.T) {
	cases := map[string]ModelFacts{
		"qwen3_moe.json": {ModelType: "qwen3_moe", Layers: 48, MoELayers: span(0, 48), Experts: 128, TopK: 8, Vocab: 151936, ContextLen: 40960},
		// decoder_sparse_step 2: layers 1, 3, 5 are sparse; mlp_only_layers takes 3 out.
		"qwen3_moe_sparse_step.json": {ModelType: "qwen3_moe", Layers: 6, MoELayers: []int{1, 5}, Experts: 8, TopK: 2, Vocab: 300, ContextLen: 4096},
		"mixtral.json":               {ModelType: "mixtral", Layers: 32, MoELayers: span(0, 32), Experts: 8, TopK: 2, Vocab: 32000, ContextLen: 32768},
		"olmoe.json":                 {ModelType: "olmoe", Layers: 16, MoELayers: span(0, 16), Experts: 64, TopK: 8, Vocab: 50304, ContextLen: 4096},
		// first_k_dense_replace dense layers first; shared experts are not routed.
		"deepseek_v2_lite.json": {ModelType: "deepseek_v2", Layers: 27, MoELayers: span(1, 27), Experts: 64, TopK: 6, Vocab: 102400, ContextLen: 163840},
		"deepseek_v3.json":      {ModelType: "deepseek_v3", Layers: 61, MoELayers: span(3, 61), Experts: 256, TopK: 8, Vocab: 129280, ContextLen: 163840},
		"llama_smollm2.json":    {ModelType: "llama", Layers: 30, Vocab: 49152, ContextLen: 8192},
	}
	for name, want := range cases {
		path := filepath.Join("testdata", "configs", name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := FactsFromConfig(path, b)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got.MoELayers == nil {
			got.MoELayers = nil
		}
		if want.MoELayers == nil && len(got.MoELayers) == 0 {
			got.MoELayers = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		if got.MoE() != (want.Experts > 0) {
			t.Errorf("%s: MoE() = %v", name, got.MoE())
		}
	}
}

func TestFactsEngineContextOverrides(t *testing.T) {
	f := ModelFacts{ContextLen: 8192}
	if f.WithContext(2048).ContextLen != 2048 || f.WithContext(0).ContextLen != 8192 {
		t.Fatal("WithContext")
	}
}

func TestFactsRejectBadConfigs(t *testing.T) {
	cases := map[string]string{
		`{"vocab_size": 10}`:       "num_hidden_layers",
		`{"num_hidden_layers": 2}`: "vocab_size",
		`{"num_hidden_layers": 2, "vocab_size": 10, "num_experts": 4}`:                                                            "num_experts_per_tok",
		`{"num_hidden_layers": 2, "vocab_size": 10, "num_experts": 4, "num_experts_per_tok": 5}`:                                  "num_experts_per_tok",
		`{"num_hidden_layers": 2, "vocab_size": 10, "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [7]}`:          "mlp_only_layers",
		`{"num_hidden_layers": 2, "vocab_size": 10, "n_routed_experts": 4, "num_experts_per_tok": 2, "first_k_dense_replace": 2}`: "no layer is sparse",
		`not json`: "not a config.json",
	}
	for cfg, want := range cases {
		_, err := FactsFromConfig("x/config.json", []byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "x/config.json") {
			t.Errorf("%s: error %v, want one naming x/config.json and %q", cfg, err, want)
		}
	}
}

func TestFactsTextConfig(t *testing.T) {
	b := []byte(`{"model_type": "wrapper", "text_config": {"num_hidden_layers": 2, "vocab_size": 10, "num_local_experts": 4, "num_experts_per_tok": 2}}`)
	f, err := FactsFromConfig("c", b)
	if err != nil || f.Layers != 2 || f.Experts != 4 || len(f.MoELayers) != 2 || f.ModelType != "wrapper" {
		t.Fatalf("%+v %v", f, err)
	}
}
