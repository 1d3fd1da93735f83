package activities

import (
	"context"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// loadFacts reads the policy's model facts once per episode (per worker):
// the checkpoint's config.json, from the model-files sidecar when the worker
// names one (-model-files), else from t1flow's own servers (their
// /get_model_info carries it); the context length the engine reports
// overrides max_position_embeddings.
func (a *Activities) loadFacts(ctx context.Context, pool *inference.Pool, session string, e *episode) error {
	if e.facts != nil {
		return nil
	}
	b, src, err := a.modelConfig(ctx, pool, session)
	if err != nil {
		return err
	}
	f, err := inference.FactsFromConfig(src, b)
	if err != nil {
		return errs.BadInputf("%v", err)
	}
	info, err := pool.Info(ctx, session)
	if err != nil {
		return inferenceErr(err)
	}
	f = f.WithContext(info.ContextLen)
	if f.ContextLen <= 0 {
		return errs.BadInputf("%s: no max_position_embeddings, and the engine reports no context length", src)
	}
	e.facts = &f
	return nil
}

func (a *Activities) modelConfig(ctx context.Context, pool *inference.Pool, session string) ([]byte, string, error) {
	if a.ModelFiles != "" {
		b, err := a.modelFiles().ModelConfig(ctx)
		if err != nil {
			return nil, "", inferenceErr(err)
		}
		return b, a.ModelFiles + "/model_config", nil
	}
	if pool.Kind() != inference.EngineT1flow {
		return nil, "", errs.BadInputf("-inference-engine %s: the model facts come from the checkpoint's config.json; name the model-files sidecar serving it (-model-files URL or T1FLOW_MODEL_FILES)", pool.Kind())
	}
	mi, err := pool.ModelInfo(ctx, session)
	if err != nil {
		return nil, "", inferenceErr(err)
	}
	if len(mi.Config) == 0 {
		return nil, "", errs.BadInputf("inference %s: /get_model_info has no \"config\" (the checkpoint's config.json); t1flow's reference and hf servers report it", mi.ModelPath)
	}
	return mi.Config, "/get_model_info config of " + mi.ModelPath, nil
}

// sidecarModelInfo is the model info the harness needs (the vocabulary size
// its chat template is checked against) from the checkpoint's config.json
// as the model-files sidecar serves it; nil: none (no sidecar).
func sidecarModelInfo(ctx context.Context, mf *harness.ModelFiles) (inference.ModelInfo, error) {
	if mf == nil {
		return inference.ModelInfo{}, nil
	}
	b, err := mf.ModelConfig(ctx)
	if err != nil {
		return inference.ModelInfo{}, err
	}
	f, err := inference.FactsFromConfig(mf.BaseURL+"/model_config", b)
	if err != nil {
		return inference.ModelInfo{}, errs.BadInputf("%v", err)
	}
	return inference.ModelInfo{ModelPath: mf.BaseURL, VocabSize: f.Vocab, NumLayers: f.Layers, NumExperts: f.Experts, TopK: f.TopK}, nil
}

// replyText decodes a reply the engine answered without text (stock vLLM's
// token mode returns token IDs only) with the checkpoint's own tokenizer, the
// model-files sidecar's, without the end of turn it stopped on, as the
// other engines' text is.
func (a *Activities) replyText(ctx context.Context, ep *episode, seg *segment) (string, error) {
	ids := seg.Sampled
	if n := len(ids); n > 0 && int(ids[n-1]) == *ep.chat.EndOfTurnID {
		ids = ids[:n-1]
	}
	mf := a.modelFiles()
	if len(ids) == 0 || mf == nil {
		return "", nil
	}
	text, err := mf.Detokenize(ctx, toInts(ids))
	if err != nil {
		return "", inferenceErr(err)
	}
	seg.Rendered += text
	return text, nil
}
