package harness

import (
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// Template is the served model's chat template, which the harness renders
// every prompt and glue with: it comes from /get_model_info's "chat" field,
// never from constants here, so one harness drives the reference model and
// a Hugging Face checkpoint alike. A server that does not report it (SGLang
// itself does not) is refused: guessing a template would train on tokens
// the model was never meant to see.
func Template(info inference.ModelInfo) (inference.ChatTemplate, error) {
	c := info.Chat
	switch {
	case c == nil:
		return inference.ChatTemplate{}, errs.BadInputf("inference %s: /get_model_info has no \"chat\" field (the chat template: system_prefix, user_prefix, assistant_prefix, end_of_turn, end_of_turn_id, turn_separator); t1flow's reference and hf servers report it (docs/trainer-protocol.md)", info.ModelPath)
	case c.EndOfTurn == "":
		return inference.ChatTemplate{}, errs.BadInputf("inference %s: /get_model_info chat.end_of_turn is empty", info.ModelPath)
	case c.EndOfTurnID == nil || *c.EndOfTurnID < 0:
		return inference.ChatTemplate{}, errs.BadInputf("inference %s: /get_model_info chat.end_of_turn_id is missing or negative", info.ModelPath)
	case info.VocabSize > 0 && *c.EndOfTurnID >= info.VocabSize:
		return inference.ChatTemplate{}, errs.BadInputf("inference %s: /get_model_info chat.end_of_turn_id %d is outside the vocabulary (%d)", info.ModelPath, *c.EndOfTurnID, info.VocabSize)
	}
	return *c, nil
}
