package inference

import (
	"encoding/json"
	"fmt"
	"sort"
)

// ModelFacts are what rollouts need to know about the served model, read
// from the checkpoint's own config.json (never from a custom engine
// endpoint), so any stock engine serving that checkpoint works.
type ModelFacts struct {
	ModelType string `json:"model_type"`
	// Layers is num_hidden_layers: the layer dimension of SGLang's routing.
	Layers int `json:"layers"`
	// MoELayers are the indices of the sparse (MoE) layers, ascending; empty
	// for a dense model. Only these layers' routing is checked and replayed.
	MoELayers []int `json:"moe_layers"`
	Experts   int   `json:"experts"` // routed experts per MoE layer (shared experts excluded)
	TopK      int   `json:"top_k"`
	Vocab     int   `json:"vocab"`
	// ContextLen is max_position_embeddings unless the engine reports its own
	// (WithContext).
	ContextLen int `json:"context_len"`
}

// MoE reports whether the model routes any layer through experts.
func (f ModelFacts) MoE() bool { return len(f.MoELayers) > 0 }

// WithContext returns f with the engine's context length, when it reports one.
func (f ModelFacts) WithContext(n int) ModelFacts {
	if n > 0 {
		f.ContextLen = n
	}
	return f
}

// hfConfig holds the config.json fields of the architectures t1flow knows;
// the names are the Hugging Face configs' own.
type hfConfig struct {
	ModelType     string          `json:"model_type"`
	TextConfig    json.RawMessage `json:"text_config"`
	Layers        *int            `json:"num_hidden_layers"`
	Vocab         *int            `json:"vocab_size"`
	MaxPos        int             `json:"max_position_embeddings"`
	TopK          *int            `json:"num_experts_per_tok"`
	NumExperts    *int            `json:"num_experts"`       // Qwen2/3-MoE, OLMoE
	LocalExperts  *int            `json:"num_local_experts"` // Mixtral
	RoutedExperts *int            `json:"n_routed_experts"`  // DeepSeek-V2/V3
	SparseStep    *int            `json:"decoder_sparse_step"`
	MLPOnly       []int           `json:"mlp_only_layers"`
	FirstKDense   *int            `json:"first_k_dense_replace"`
	MoELayerFreq  *int            `json:"moe_layer_freq"`
}

// FactsFromConfig parses a checkpoint's config.json. src names where the
// bytes came from (a path or a URL) in errors.
func FactsFromConfig(src string, b []byte) (ModelFacts, error) {
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return ModelFacts{}, fmt.Errorf("%s: not a config.json: %w", src, err)
	}
	if c.Layers == nil && len(c.TextConfig) > 0 {
		// Multimodal wrappers keep the language model's fields in text_config.
		f, err := FactsFromConfig(src+": text_config", c.TextConfig)
		if f.ModelType == "" {
			f.ModelType = c.ModelType
		}
		return f, err
	}
	if c.Layers == nil || *c.Layers <= 0 {
		return ModelFacts{}, fmt.Errorf("%s: num_hidden_layers is missing or not > 0", src)
	}
	if c.Vocab == nil || *c.Vocab <= 0 {
		return ModelFacts{}, fmt.Errorf("%s: vocab_size is missing or not > 0", src)
	}
	f := ModelFacts{ModelType: c.ModelType, Layers: *c.Layers, Vocab: *c.Vocab, ContextLen: c.MaxPos}
	experts := firstSet(c.NumExperts, c.LocalExperts, c.RoutedExperts)
	if experts == 0 {
		return f, nil // dense (Llama, Qwen2, SmolLM2, ...): no routing
	}
	if c.TopK == nil || *c.TopK <= 0 || *c.TopK > experts {
		return ModelFacts{}, fmt.Errorf("%s: %d experts but num_experts_per_tok is missing or outside [1, %d]", src, experts, experts)
	}
	f.Experts, f.TopK = experts, *c.TopK
	moe, err := moeLayers(src, c, f.Layers)
	if err != nil {
		return ModelFacts{}, err
	}
	f.MoELayers = moe
	return f, nil
}

// moeLayers applies each architecture's rule for which layers are sparse:
// Qwen2/3-MoE (decoder_sparse_step, mlp_only_layers, as its modeling code:
// layer i is sparse when i is not in mlp_only_layers and (i+1) % step == 0),
// DeepSeek-V2/V3 (first_k_dense_replace dense layers, then every
// moe_layer_freq-th), Mixtral and OLMoE (every layer).
func moeLayers(src string, c hfConfig, n int) ([]int, error) {
	out := []int{}
	switch {
	case c.FirstKDense != nil || c.RoutedExperts != nil:
		k, freq := 0, 1
		if c.FirstKDense != nil {
			k = *c.FirstKDense
		}
		if c.MoELayerFreq != nil {
			freq = *c.MoELayerFreq
		}
		if k < 0 || freq <= 0 {
			return nil, fmt.Errorf("%s: first_k_dense_replace %d must be >= 0 and moe_layer_freq %d > 0", src, k, freq)
		}
		for i := k; i < n; i++ {
			if i%freq == 0 {
				out = append(out, i)
			}
		}
	case c.SparseStep != nil || c.MLPOnly != nil:
		step := 1
		if c.SparseStep != nil {
			step = *c.SparseStep
		}
		if step <= 0 {
			return nil, fmt.Errorf("%s: decoder_sparse_step %d must be > 0", src, step)
		}
		dense := map[int]bool{}
		for _, l := range c.MLPOnly {
			if l < 0 || l >= n {
				return nil, fmt.Errorf("%s: mlp_only_layers holds %d, outside [0, %d)", src, l, n)
			}
			dense[l] = true
		}
		for i := 0; i < n; i++ {
			if !dense[i] && (i+1)%step == 0 {
				out = append(out, i)
			}
		}
	default:
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: experts are configured but no layer is sparse (check decoder_sparse_step, mlp_only_layers, first_k_dense_replace)", src)
	}
	sort.Ints(out)
	return out, nil
}

func firstSet(ps ...*int) int {
	for _, p := range ps {
		if p != nil && *p > 0 {
			return *p
		}
	}
	return 0
}
