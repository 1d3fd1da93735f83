package workflows_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/workflows"
)

type chatMsg struct{ Role, Content string }

// TestChatAgentRunsATerminus2Episode: a chat agent on the terminus-2
// harness gets Harbor's single user prompt (and no temperature or output
// cap), has its first reply cut by the length limit and answered in the
// same turn, starts `sleep 1000`, interrupts
// it with C-c, sees its echo run, and ends on a confirmed task_complete.
func TestChatAgentRunsATerminus2Episode(t *testing.T) {
	if _, err := os.Stat(harbor.Python()); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") == "" {
			t.Skipf("no Harbor env at %s (make harborenv)", harbor.Python())
		}
		t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", harbor.Python())
	}
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter")
	replies := []string{
		`{"analysis": "Fresh shell.", "plan": "Start a long`, // cut by the length limit: answered in the same turn
		`{"analysis": "Fresh shell.", "plan": "Start a long command.", "commands": [{"keystrokes": "sleep 1000\n", "duration": 1}]}`,
		`{"analysis": "sleep hangs.", "plan": "Interrupt it.", "commands": [{"keystrokes": "C-c", "duration": 0.5}, {"keystrokes": "echo after-$((1+1))\n", "duration": 0.5}], "task_complete": false}`,
		`{"analysis": "Done.", "plan": "Finish.", "commands": [], "task_complete": true}`,
		`{"analysis": "Done.", "plan": "Confirm.", "commands": [], "task_complete": true}`,
	}
	var mu sync.Mutex
	var seen [][]chatMsg
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Messages    []chatMsg `json:"messages"`
			Temperature *float64  `json:"temperature"`
			MaxTokens   *int      `json:"max_tokens"`
		}
		json.NewDecoder(req.Body).Decode(&body)
		mu.Lock()
		seen = append(seen, body.Messages)
		n := (len(body.Messages) - 1) / 2
		mu.Unlock()
		if n >= len(replies) || body.Temperature != nil || body.MaxTokens != nil {
			http.Error(w, "no more replies, or temperature or max_tokens sent (Harbor leaves both to the model)", 500)
			return
		}
		finish := "stop"
		if n == 0 {
			finish = "length"
		}
		fmt.Fprintf(w, `{"choices": [{"message": {"role": "assistant", "content": %q}, "finish_reason": %q}]}`, replies[n], finish)
	}))
	defer srv.Close()
	agent := activities.AgentSpec{Kind: activities.AgentChat, Endpoint: srv.URL, Model: "scripted", Harness: harness.Terminus2}
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, TurnCap: 60}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.AgentEnd != workflows.AgentEndCompleted || ro.Turns != 4 || !ro.Scored {
		t.Fatalf("rollout ended %s after %d turns (scored %v, %s)", ro.AgentEnd, ro.Turns, ro.Scored, ro.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 || len(seen[0]) != 1 || seen[0][0].Role != "user" || !strings.HasPrefix(seen[0][0].Content, "You are an AI assistant tasked") {
		t.Fatalf("first request is not Terminus-2's single user message: %+v", seen[0])
	}
	if !strings.Contains(seen[0][0].Content, "Current Terminal Screen:") || !strings.Contains(seen[0][0].Content, "Task Description:") {
		t.Errorf("first prompt lacks the terminal state or the task: %q", seen[0][0].Content)
	}
	if len(seen[1]) != 3 || seen[1][1].Content != replies[0] || !strings.HasPrefix(seen[1][2].Content, "ERROR!! NONE of the actions you just requested were performed because you exceeded the maximum output length.") {
		t.Errorf("the cut reply was not answered in the same turn as Harbor answers it: %+v", seen[1])
	}
	seen = seen[1:]
	last := func(i int) string { return seen[i][len(seen[i])-1].Content }
	if !strings.Contains(last(1), "sleep 1000") || strings.Contains(last(1), "WARNINGS:") {
		t.Errorf("turn 1 observation (task_complete is optional: no warning): %q", last(1))
	}
	if !strings.Contains(last(2), "^C") || !strings.Contains(last(2), "after-2") {
		t.Errorf("C-c did not interrupt sleep 1000: %q", last(2))
	}
	if !strings.Contains(last(3), "Are you sure you want to mark the task as complete?") {
		t.Errorf("the first task_complete was not asked to confirm: %q", last(3))
	}
}
