package harness

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/inference"
)

func eotID(id int) *int { return &id }

// reference is the chat template gpu/reference/server.py reports.
var reference = inference.ChatTemplate{SystemPrefix: "<|im_start|><|system|>", UserPrefix: "<|im_start|><|user|>",
	AssistantPrefix: "<|im_start|><|assistant|>", EndOfTurn: "<|im_end|>", EndOfTurnID: eotID(260)}

// qwen is a ChatML template as a Hugging Face tokenizer's chat template renders it.
var qwen = inference.ChatTemplate{SystemPrefix: "<|im_start|>system\n", UserPrefix: "<|im_start|>user\n",
	AssistantPrefix: "<|im_start|>assistant\n", EndOfTurn: "<|im_end|>", EndOfTurnID: eotID(151645), TurnSeparator: "\n"}

// The reference template renders exactly the pieces the harness hard-coded
// before templates came from model info: the same text in the same pieces
// (special tokens parsed or split alike), so the same token IDs.
func TestReferenceTemplateRendersAsBefore(t *testing.T) {
	obs := "Task:\nx\n\nCurrent terminal state:\n$ "
	want := Pieces{{Text: "<|im_start|><|system|>" + SystemPrompt + "<|im_end|><|im_start|><|user|>"}, {Text: obs, Plain: true}, {Text: "<|im_end|><|im_start|><|assistant|>"}}
	if got := FirstPromptPieces(reference, obs); !reflect.DeepEqual(got, want) {
		t.Errorf("first prompt:\n got %q\nwant %q", got, want)
	}
	for stitch, open := range map[string]string{StitchEOT: "<|im_start|><|user|>", StitchEOS: "<|im_end|><|im_start|><|user|>",
		StitchLength: "<|im_end|><|im_start|><|user|>", StitchStopString: "<|im_end|><|im_start|><|user|>"} {
		want := Pieces{{Text: open}, {Text: obs, Plain: true}, {Text: "<|im_end|><|im_start|><|assistant|>"}}
		if got := GluePieces(reference, obs, stitch); !reflect.DeepEqual(got, want) {
			t.Errorf("%s glue:\n got %q\nwant %q", stitch, got, want)
		}
	}
	parts, err := SolutionTurns(reference, "x", "ls\n")
	if err != nil {
		t.Fatal(err)
	}
	act := Pieces{{Text: `{"commands":[{"keystrokes":"ls\n","duration":1}],"task_complete":true}`, Plain: true}, {Text: "<|im_end|>"}}
	if !reflect.DeepEqual(parts[1], act) {
		t.Errorf("SFT turn:\n got %q\nwant %q", parts[1], act)
	}
}

// A ChatML template with a separator renders as the contract in
// docs/trainer-protocol.md says.
func TestTemplateWithSeparator(t *testing.T) {
	first := FirstPrompt(qwen, "OBS")
	if want := "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nOBS<|im_end|>\n<|im_start|>assistant\n"; first != want {
		t.Errorf("first prompt %q", first)
	}
	if g := ObservationGlue(qwen, "OBS", StitchEOT); g != "\n<|im_start|>user\nOBS<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("eot glue %q", g)
	}
	if g := ObservationGlue(qwen, "OBS", StitchLength); g != "<|im_end|>\n<|im_start|>user\nOBS<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("length glue %q", g)
	}
	// SFT: what a rollout's turn 1 context would be after the policy stopped on end of turn.
	parts, _ := SolutionTurns(qwen, "x", "ls\n")
	if !strings.HasSuffix(parts[1].String(), "}<|im_end|>") || !strings.HasPrefix(parts[2].String(), "\n<|im_start|>user\nAre you sure") {
		t.Errorf("SFT turns %q", parts)
	}
}

func TestTemplateFromModelInfo(t *testing.T) {
	var info inference.ModelInfo
	if err := json.Unmarshal([]byte(`{"model_path": "m", "vocab_size": 300, "chat": {"system_prefix": "<|im_start|><|system|>", "user_prefix": "<|im_start|><|user|>", "assistant_prefix": "<|im_start|><|assistant|>", "end_of_turn": "<|im_end|>", "end_of_turn_id": 260, "turn_separator": ""}}`), &info); err != nil {
		t.Fatal(err)
	}
	got, err := Template(info)
	if err != nil || !reflect.DeepEqual(got, reference) {
		t.Fatalf("%+v %v", got, err)
	}
	for name, c := range map[string]struct {
		json, field string
	}{
		"no chat (an SGLang server)": {`{"model_path": "m"}`, `no "chat" field`},
		"no end of turn":             {`{"chat": {"end_of_turn_id": 3}}`, "chat.end_of_turn is empty"},
		"no end of turn id":          {`{"chat": {"end_of_turn": "</s>"}}`, "chat.end_of_turn_id is missing"},
		"negative id":                {`{"chat": {"end_of_turn": "</s>", "end_of_turn_id": -1}}`, "chat.end_of_turn_id is missing or negative"},
		"id outside the vocabulary":  {`{"vocab_size": 10, "chat": {"end_of_turn": "</s>", "end_of_turn_id": 10}}`, "outside the vocabulary"},
	} {
		var info inference.ModelInfo
		json.Unmarshal([]byte(c.json), &info)
		if _, err := Template(info); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.field)
		}
	}
}
