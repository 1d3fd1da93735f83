package activities

import (
	"testing"

	"github.com/t1flow/t1flow/harness"
)

// A handoff's segments reload in the order they were committed, each into
// its own context, with the rewound observation glue dropped; a partial
// segment neither ends its turn nor moves the pane offset.
func TestEpisodeReloadsHandoffContexts(t *testing.T) {
	a := &Activities{EpisodeDir: t.TempDir()}
	ep, err := a.episode("r", "s")
	if err != nil {
		t.Fatal(err)
	}
	commit := func(s segment) {
		t.Helper()
		if err := ep.commit(s); err != nil {
			t.Fatal(err)
		}
	}
	// Turn 0: prompt 1 2, reply 3 (sampled), observation glue 4 5.
	commit(segment{Turn: 0, Tokens: []int32{1, 2, 3, 4, 5}, LossMask: []uint8{0, 0, 1, 0, 0}, Logprobs: make([]float32, 5), CoveredTo: 2, PaneOffset: 7, Prompt: "first"})
	// Turn 1 hands off: summary in context 0 after dropping the glue (4 5).
	commit(segment{Turn: 1, Partial: true, Step: harness.StepSummary, Rewind: 2, Tokens: []int32{6, 7}, LossMask: []uint8{0, 1}, Logprobs: make([]float32, 2), CoveredTo: 4, PaneOffset: 99})
	commit(segment{Turn: 1, Partial: true, Step: harness.StepQuestions, Context: 1, Tokens: []int32{8, 9}, LossMask: []uint8{0, 1}, Logprobs: make([]float32, 2), CoveredTo: 1})
	commit(segment{Turn: 1, Partial: true, Step: harness.StepAnswers, Tokens: []int32{10, 11}, LossMask: []uint8{0, 1}, Logprobs: make([]float32, 2), CoveredTo: 5})
	if len(ep.segs) != 1 || len(ep.partial) != 3 || ep.offset != 7 || !ep.handoffDue(AgentSpec{}, &harness.Spec{}, 1000) {
		t.Fatalf("mid-handoff: %d turns, %d partial, offset %d", len(ep.segs), len(ep.partial), ep.offset)
	}
	commit(segment{Turn: 1, Context: 2, Tokens: []int32{12, 13, 14}, LossMask: []uint8{0, 0, 1}, Logprobs: make([]float32, 3), CoveredTo: 2, PaneOffset: 8})

	a2 := &Activities{EpisodeDir: a.EpisodeDir}
	re, err := a2.episode("r", "s")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{{1, 2, 3, 6, 7, 10, 11}, {8, 9}, {12, 13, 14}}
	if len(re.contexts) != 3 || len(re.segs) != 2 || len(re.partial) != 0 || re.offset != 8 || re.lastContext() != 2 || re.nextContext() != 3 {
		t.Fatalf("reloaded: %d contexts, %d turns, %d partial, offset %d", len(re.contexts), len(re.segs), len(re.partial), re.offset)
	}
	for i, c := range re.contexts {
		if !equal32(c.tokens, want[i]) || len(c.mask) != len(c.tokens) || len(c.logprobs) != len(c.tokens) {
			t.Errorf("context %d: tokens %v (mask %d, logprobs %d), want %v", i, c.tokens, len(c.mask), len(c.logprobs), want[i])
		}
	}
	if re.contexts[0].end() != 6 || re.all[1].Step != harness.StepSummary || re.all[3].Step != harness.StepAnswers {
		t.Errorf("context 0 ends at %d; steps %q %q", re.contexts[0].end(), re.all[1].Step, re.all[3].Step)
	}
}

func TestHandoffDueCountsTheConversationWithoutThePendingObservation(t *testing.T) {
	ep := &episode{}
	ep.use(0)
	ep.tokens, ep.covered = make([]int32, 900), 599 // 600 tokens through the last reply, then glue
	s := &harness.Spec{SummarizeThreshold: 8000}
	cases := []struct {
		agent AgentSpec
		limit int
		due   bool
	}{
		{AgentSpec{HandoffTokens: 401}, 1000, true},
		{AgentSpec{HandoffTokens: 400}, 1000, false}, // 400 left after the reply: not fewer than 400
		{AgentSpec{}, 8600, false},
		{AgentSpec{}, 8599, true},
		{AgentSpec{HandoffTokens: -1}, 700, false},
	}
	for _, c := range cases {
		if got := ep.handoffDue(c.agent, s, c.limit); got != c.due {
			t.Errorf("handoff_tokens %d, limit %d: due %v, want %v", c.agent.HandoffTokens, c.limit, got, c.due)
		}
	}
	ep.partial = []segment{{Step: harness.StepLengthRetry}}
	if ep.handoffDue(AgentSpec{HandoffTokens: 401}, s, 1000) {
		t.Error("a turn resuming after a length retry started a handoff")
	}
}

func equal32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
