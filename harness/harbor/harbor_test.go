package harbor_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/inference"
)

// needHarbor skips without Harbor's env, except in integration runs (make
// test), where a missing env is a failure: the comparison is the point.
func needHarbor(t *testing.T) {
	t.Helper()
	if err := harbor.Installed(); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// Installed names the missing interpreter, and Run refuses without it.
func TestInstalledNamesTheMissingInterpreter(t *testing.T) {
	missing := t.TempDir() + "/no-python"
	t.Setenv("T1FLOW_HARBOR_PYTHON", missing)
	err := harbor.Installed()
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "make harborenv") {
		t.Fatalf("Installed() = %v, want an error naming %s and make harborenv", err, missing)
	}
	if _, err := harbor.Run(context.Background(), "spec", nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Run without the interpreter: %v, want an error naming %s", err, missing)
	}
	if err := os.WriteFile(missing, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := harbor.Installed(); err != nil {
		t.Fatalf("Installed() with %s present: %v", missing, err)
	}
}

type reply struct {
	Name  string `json:"name"`
	Reply string `json:"reply"`
}

type harborParse struct {
	Commands []struct {
		Keystrokes string  `json:"keystrokes"`
		Duration   float64 `json:"duration"`
	} `json:"commands"`
	TaskComplete bool   `json:"task_complete"`
	Error        string `json:"error"`
	Warning      string `json:"warning"`
	Feedback     string `json:"feedback"`
	Analysis     string `json:"analysis"`
	Plan         string `json:"plan"`
}

type screenCase struct {
	Previous *string `json:"previous"`
	Current  string  `json:"current"`
}

type checkOut struct {
	Parsed  []harborParse `json:"parsed"`
	Prompts []string      `json:"prompts"`
	Limits  []string      `json:"limits"`
	Screens []*string     `json:"screens"`
}

func str(s string) *string { return &s }

// TestTerminus2MatchesHarbor parses the reply corpus (harness/testdata) with
// t1flow's parser and with Harbor's own TerminusJSONPlainParser and
// _handle_llm_interaction, and renders the first prompt, the output limit
// and the incremental-output rule both ways: every field must agree.
func TestTerminus2MatchesHarbor(t *testing.T) {
	needHarbor(t)
	var corpus struct {
		Replies []reply `json:"replies"`
	}
	b, err := os.ReadFile("../testdata/terminus2-replies.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &corpus); err != nil {
		t.Fatal(err)
	}
	var replies []string
	for _, r := range corpus.Replies {
		replies = append(replies, r.Reply)
	}
	prompts := []map[string]string{
		{"instruction": "Write hello to /app/hello.txt.", "terminal_state": "Current Terminal Screen:\nroot@sandbox:/app# "},
		{"instruction": "Fix {the} bug in main.c; use `make` (braces {{ }} stay).\n", "terminal_state": "Current Terminal Screen:\n$ é ✓\n"},
	}
	big := strings.Repeat("line of output é\n", 1200)
	limits := []string{"short", big, strings.Repeat("✓", 6000), strings.Repeat("x", 10000), strings.Repeat("x", 10001)}
	screens := []screenCase{
		{nil, "root@sandbox:/app# "},
		{str("root@sandbox:/app# "), "root@sandbox:/app# ls\nfile\nroot@sandbox:/app# "},
		{str("a\nb\n$ "), "a\nb\n$ echo hi\nhi\n$ "},
		{str("gone\n$ "), "cleared\n$ "},
		{str("$ "), "$ "},
		{str("x\n\n\n"), "x\n\n\nmore é\n"},
		{str("héllo\nwörld\n$ "), "héllo\nwörld\n$ ls\nfile ✓\n$ "},
	}
	req, _ := json.Marshal(map[string]any{"replies": replies, "prompts": prompts, "limits": limits, "screens": screens})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raw, err := harbor.Run(ctx, "check", req)
	if err != nil {
		t.Fatal(err)
	}
	var want checkOut
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("spec.py check: %v", err)
	}
	spec, err := harbor.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range corpus.Replies {
		compareParse(t, r.Name, spec.Parse(r.Reply), want.Parsed[i])
	}
	for i, p := range prompts {
		got, err := spec.FirstPrompt(p["instruction"], p["terminal_state"])
		if err != nil || got != want.Prompts[i] {
			t.Errorf("first prompt %d differs from Harbor's (err %v):\n got %q\nwant %q", i, err, got, want.Prompts[i])
		}
	}
	for i, l := range limits {
		if got := spec.Limit(l); got != want.Limits[i] {
			t.Errorf("limit %d (%d bytes) differs from Harbor's:\n got %q\nwant %q", i, len(l), tail(got), tail(want.Limits[i]))
		}
	}
	for i, c := range screens {
		got, ok := harness.FindNewContent(c.Previous, c.Current)
		if w := want.Screens[i]; (w == nil) != !ok || (w != nil && got != *w) {
			t.Errorf("screen %d: new content %q (%v), Harbor's %v", i, got, ok, deref(w))
		}
	}
}

func compareParse(t *testing.T, name string, got harness.Parsed, want harborParse) {
	t.Helper()
	if got.Error != want.Error || got.Warning != want.Warning || got.Feedback() != want.Feedback {
		t.Errorf("%s: feedback differs from Harbor's:\n got %q\nwant %q", name, got.Feedback(), want.Feedback)
	}
	if got.TaskComplete != want.TaskComplete {
		t.Errorf("%s: task_complete %v, Harbor's %v", name, got.TaskComplete, want.TaskComplete)
	}
	if got.Error == "" && (got.Analysis != want.Analysis || got.Plan != want.Plan) {
		t.Errorf("%s: analysis/plan %q/%q, Harbor's %q/%q", name, got.Analysis, got.Plan, want.Analysis, want.Plan)
	}
	if len(got.Commands) != len(want.Commands) {
		t.Errorf("%s: %d commands, Harbor's %d", name, len(got.Commands), len(want.Commands))
		return
	}
	for i, c := range got.Commands {
		w := want.Commands[i]
		if c.Keystrokes != w.Keystrokes || !(c.Duration == w.Duration || math.IsNaN(c.Duration) && math.IsNaN(w.Duration)) {
			t.Errorf("%s: command %d %q/%v, Harbor's %q/%v", name, i+1, c.Keystrokes, c.Duration, w.Keystrokes, w.Duration)
		}
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return "…" + s[len(s)/2-150:len(s)/2+150] + "…"
	}
	return s
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// TestSolutionTurnsAreCleanTerminus2Replies: SFT teaches replies that
// Harbor's rules read without an error or a warning, with analysis and plan,
// every step as a command, and the completion confirmed.
func TestSolutionTurnsAreCleanTerminus2Replies(t *testing.T) {
	needHarbor(t)
	spec, err := harbor.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eot := 2
	chat := inference.ChatTemplate{UserPrefix: "<u>", AssistantPrefix: "<a>", EndOfTurn: "<e>", EndOfTurnID: &eot, TurnSeparator: "\n"}
	parts, err := spec.SolutionTurns(chat, "Write hello.", "#!/bin/bash\necho hello > /app/hello.txt\ncat /app/hello.txt\n", "root@sandbox:/app# \n")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 4 || !strings.HasPrefix(parts[0].String(), "<u>You are an AI assistant") || strings.Contains(parts[0].String(), "system") {
		t.Fatalf("first prompt is not Terminus-2's single user message: %q", parts[0].String()[:min(80, len(parts[0].String()))])
	}
	// The confirmation shows the commands at their prompts, as a rollout's
	// screen does once they ran, not the fresh screen before them.
	ran := spec.NewOutputLabel + "root@sandbox:/app# echo hello > /app/hello.txt\nroot@sandbox:/app# cat /app/hello.txt\nroot@sandbox:/app# "
	if glue := parts[2].String(); !strings.Contains(glue, spec.ConfirmBefore+ran+spec.ConfirmAfter) {
		t.Errorf("the confirmation\n%q\nlacks the screen after the commands\n%q", glue, ran)
	}
	pending := false
	for i, want := range []int{2, 0} {
		reply := strings.TrimSuffix(parts[2*i+1].String(), "<e>")
		p := spec.Parse(reply)
		if p.Error != "" || p.Warning != "" || !p.TaskComplete || len(p.Commands) != want || p.Analysis == "" || p.Plan == "" {
			t.Errorf("turn %d %q parses as %+v", i, reply, p)
		}
		obs, confirm, done := spec.Next(p, pending, "x")
		if i == 0 && (!confirm || !strings.Contains(parts[2].String(), spec.ConfirmAfter) || !strings.HasPrefix(obs, spec.ConfirmBefore)) {
			t.Errorf("the first completion is not asked to confirm: %q", obs)
		}
		if i == 1 && !done {
			t.Errorf("the second completion does not end the episode")
		}
		pending = confirm
	}
}
