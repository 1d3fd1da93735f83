package activities

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

func TestParseAction(t *testing.T) {
	a, err := ParseAction("sure! {\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [{\"keystrokes\": \"ls\\n\", \"duration\": 500}], \"task_complete\": false} done")
	if err != nil || len(a.Commands) != 1 || a.Commands[0].Keystrokes != "ls\n" || a.Commands[0].Duration != MaxKeysDuration {
		t.Fatalf("%+v %v", a, err)
	}
	a, err = ParseAction(`{"analysis": "", "plan": "", "commands": [], "task_complete": true}`)
	if err != nil || !a.TaskComplete {
		t.Fatalf("%+v %v", a, err)
	}
	for _, bad := range []string{"no json here", "{not json}", `{"commands": [{"keystrokes": "x", "duration": -1}]}`,
		`{"commands": [], "task_complete": false}`, `{"command": "ls"}`} {
		if _, err := ParseAction(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestTmuxKeysQuotesAndWaits(t *testing.T) {
	s := tmuxKeys([]Keys{{Keystrokes: "echo 'hi' $HOME\n", Duration: 2}, {Keystrokes: "q", Duration: 100}}, 5*time.Second)
	want := []string{
		`tmux send-keys -t t1flow -l -- 'echo '\''hi'\'' $HOME'`,
		"tmux send-keys -t t1flow Enter",
		"sleep 2.000",
		"tmux send-keys -t t1flow -l -- 'q'",
		"sleep 3.000", // what is left of the 5 s budget
	}
	if got := strings.Split(strings.TrimSpace(s), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got\n%s", s)
	}
}

func TestSplitPaneAndClean(t *testing.T) {
	n, body, err := splitPane("123\n---t1flow---\nhello\x1b[31m red\x1b[0m\r\n")
	if err != nil || n != 123 || cleanTerminal(body, 100, 100) != "hello red\n" {
		t.Fatalf("%d %q %v", n, cleanTerminal(body, 100, 100), err)
	}
	if _, _, err := splitPane("garbage"); err == nil {
		t.Fatal("want a marker error")
	}
}

func routed(v []int32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestCaptureRoutingValidates(t *testing.T) {
	info := inference.ModelInfo{NumLayers: 2, TopK: 2, NumExperts: 4}
	resp := func(v []int32) *inference.GenerateResponse {
		r := &inference.GenerateResponse{}
		if v != nil {
			r.MetaInfo.RoutedExperts = routed(v)
		}
		return r
	}
	good := []int32{0, 1, 2, 3, 1, 0, 3, 2} // 2 positions × 2 layers × top-2
	if r, err := captureRouting(resp(good), info, 5, 7); err != nil || len(r) != 8 {
		t.Fatalf("%v %v", r, err)
	}
	cases := map[string][]int32{
		"missing":      nil,
		"short":        good[:6],
		"out of range": {0, 1, 2, 9, 1, 0, 3, 2},
		"zero layer":   {0, 0, 2, 3, 0, 0, 3, 2},
	}
	for name, v := range cases {
		_, err := captureRouting(resp(v), info, 5, 7)
		if err == nil || !strings.Contains(err.Error(), "") || errType(err) != errs.RoutingMissing {
			t.Errorf("%s: want RoutingMissing, got %v", name, err)
		}
	}
}

func TestStitchCases(t *testing.T) {
	mk := func(fr map[string]any) *inference.GenerateResponse {
		r := &inference.GenerateResponse{}
		r.MetaInfo.FinishReason = fr
		return r
	}
	for want, fr := range map[string]map[string]any{
		StitchEOT:        {"type": "stop", "matched": float64(260)},
		StitchEOS:        {"type": "stop", "matched": float64(258)},
		StitchStopString: {"type": "stop", "matched": "</s>"},
		StitchLength:     {"type": "length", "length": float64(32)},
	} {
		if got := stitchCase(mk(fr), 260); got != want {
			t.Errorf("%v: got %s, want %s", fr, got, want)
		}
	}
}

func TestAuditDriftCatchesTampering(t *testing.T) {
	ep := &episode{}
	s0 := segment{Turn: 0, PromptLen: 3, Tokens: []int32{1, 2, 3, 10, 11}, LossMask: []uint8{0, 0, 0, 1, 1}, Sampled: []int32{10, 11}}
	s0.PromptHash = hashTokens([]int32{1, 2, 3})
	ep.apply(s0)
	s1 := segment{Turn: 1, PromptLen: 7, Tokens: []int32{20, 21, 12}, LossMask: []uint8{0, 0, 1}, Sampled: []int32{12}}
	ep.tokens = append(ep.tokens, 20, 21)
	s1.PromptHash = hashTokens(ep.tokens)
	ep.tokens = ep.tokens[:5]
	ep.apply(s1)
	d := auditDrift(ep, len(ep.tokens))
	if d.PromptMismatches != 0 || d.LossMismatches != 0 || d.Drift != 0 {
		t.Fatalf("clean episode: %+v", d)
	}
	ep.tokens[3] = 99 // a sampled token rewritten
	d = auditDrift(ep, len(ep.tokens))
	if d.LossMismatches != 1 || d.PromptMismatches != 1 {
		t.Fatalf("tampered episode: %+v", d)
	}
}
