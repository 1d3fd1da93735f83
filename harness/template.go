package harness

import (
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// Template is the served model's chat template, which the harness renders
// every prompt and glue with, when no model-files sidecar is configured: it
// comes from /get_model_info's "chat" field of t1flow's own servers, never
// from constants here. With a sidecar (ModelFiles.Chat) the template is read
// off the checkpoint's own files instead, which is what a stock engine needs.
// A server that reports neither is refused: guessing a template would train
// on tokens the model was never meant to see.
func Template(info inference.ModelInfo) (inference.ChatTemplate, error) {
	c := info.Chat
	if c == nil {
		return inference.ChatTemplate{}, errs.BadInputf("inference %s: /get_model_info has no \"chat\" field (the chat template: system_prefix, user_prefix, assistant_prefix, end_of_turn, end_of_turn_id, turn_separator) and no model-files sidecar is configured (gpu/hf/modelfiles.py; docs/trainer-protocol.md)", info.ModelPath)
	}
	if err := CheckTemplate("inference "+info.ModelPath+": /get_model_info", *c, info.VocabSize); err != nil {
		return inference.ChatTemplate{}, err
	}
	return *c, nil
}
