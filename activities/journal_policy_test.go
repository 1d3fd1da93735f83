package activities

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// A policy turn types its keystrokes once: a retry after they were sent never
// samples or types again. It resumes from the journal when what the terminal
// showed was recorded, and reports the turn lost when it was not.
func TestPolicyTurnNeverTypesTwice(t *testing.T) {
	tok := fakeTokenizer(t)
	other := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			tok.Config.Handler.ServeHTTP(w, r)
			return
		case "/get_model_info": // the glue's chat template
			json.NewEncoder(w).Encode(inference.ModelInfo{Chat: &referenceChat})
			return
		}
		other++ // sampling: a turn that would type again
		http.Error(w, "not in this test", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	a := &Activities{EpisodeDir: t.TempDir()}
	in := TurnInput{Sandbox: Sandbox{ContainerID: "c1", Name: "sb-1"}, RolloutID: "r", Turn: 0,
		Agent: AgentSpec{Kind: AgentPolicy, Inference: []string{srv.URL}}}
	ctx := context.Background()

	// Turn 0 typed its keystrokes and saw the terminal; the worker died before the commit.
	seg := segment{Turn: 0, Result: TurnResult{Turn: 0, Command: "ls"}, Tokens: []int32{1, 2}, LossMask: []uint8{1, 1}, Logprobs: []float32{-1, -1}, CoveredTo: 2}
	if err := a.writeJournal(in, journalEntry{State: journalTyped, Segment: &seg, Obs: "file.txt"}); err != nil {
		t.Fatal(err)
	}
	res, err := a.agentTurn(ctx, in) // past the disk watch, which needs Docker
	if err != nil || res.Command != "ls" || other != 0 {
		t.Fatalf("resumed turn: %+v %v, %d sampling calls", res, err, other)
	}
	ep, _ := a.episode(in.RolloutID, in.Sandbox.Name)
	if len(ep.segs) != 1 || len(ep.tokens) <= 2 || !strings.Contains(string(toBytes(ep.tokens)), "file.txt") {
		t.Fatalf("the resumed turn did not commit its observation glue: %d turns, %v", len(ep.segs), ep.tokens)
	}

	// Turn 1's keystrokes were being sent when the worker died.
	in.Turn = 1
	if err := a.journalStart(in, "rm -rf x")(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		_, err = a.agentTurn(ctx, in) // past the disk watch, which needs Docker
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != errs.TurnLost || !ae.NonRetryable() || other != 0 {
			t.Fatalf("retry %d of a turn lost mid-typing: %v, %d sampling calls", i, err, other)
		}
	}
	// A journal entry of another container (a re-run rollout) is not this turn's.
	in.Sandbox.ContainerID = "c2"
	if e, err := a.readJournal(in); e != nil || err != nil {
		t.Fatalf("stale entry read as this container's: %+v %v", e, err)
	}
}
