package harness

import (
	"strconv"

	"github.com/t1flow/t1flow/inference"
)

// Terminus-2's context handoff and its answer to a reply cut by the output
// limit, rendered from Harbor's own texts (Spec). The handoff runs as
// Terminus2._summarize does, when fewer than SummarizeThreshold tokens of
// context remain before a turn:
//
//  1. summary: the current context (up to the last reply; the pending
//     observation is never sent) + HandoffSummary, sampled;
//  2. questions: a fresh context of one user message, HandoffQuestions
//     (the task, the summary, the visible screen), sampled;
//  3. answers: step 1's context + its summary + HandoffAnswers, sampled;
//  4. the agent continues in a new context: the first prompt, the question
//     request, the questions (as the assistant's), then HandoffPrompt with
//     the answers, in place of the pending observation.
//
// Steps 1 and 3 extend the old context, 2 and 4 each open a context of
// their own: four token segments in all, each trained on the context its
// sampler saw (docs/harness.md).

// HandoffSummary is step 1's request.
func (s *Spec) HandoffSummary(instruction string) (string, error) {
	return pyFormat(s.HandoffSummaryPrompt, map[string]string{"instruction": instruction})
}

// HandoffQuestions is step 2's request (and the second user message of the
// continuing context).
func (s *Spec) HandoffQuestions(instruction, summary, screen string) (string, error) {
	return pyFormat(s.HandoffQuestionPrompt, map[string]string{"instruction": instruction, "summary": summary, "screen": screen})
}

// HandoffAnswers is step 3's request.
func (s *Spec) HandoffAnswers(questions string) (string, error) {
	return pyFormat(s.HandoffAnswerPrompt, map[string]string{"questions": questions})
}

// HandoffContinue is the prompt the agent continues with after a handoff.
func (s *Spec) HandoffContinue(answers string) (string, error) {
	return pyFormat(s.HandoffPrompt, map[string]string{"answers": answers})
}

// LengthRetry is what a reply cut by the output limit is answered with in
// the same turn; limit is the output cap in tokens, 0 when only the context
// bounds it (Harbor's "the maximum output length"). The cut reply's parser
// warnings follow, when it has any.
func (s *Spec) LengthRetry(cut string, limit int) (string, error) {
	msg := s.LengthError
	if limit > 0 {
		var err error
		if msg, err = pyFormat(s.LengthErrorLimit, map[string]string{"limit": strconv.Itoa(limit) + " tokens"}); err != nil {
			return "", err
		}
	}
	if w := s.Parse(cut).Warning; w != "" {
		msg += s.LengthWarningsLabel + w
	}
	return msg, nil
}

// HandoffContextPieces opens the continuing context up to the questions
// (which the caller appends as the sampler emitted them): the first prompt
// and the question request as two user messages, then the assistant turn.
func HandoffContextPieces(t inference.ChatTemplate, first, questions string) Pieces {
	return Pieces{
		template(t.UserPrefix), plain(first), template(t.EndOfTurn + t.TurnSeparator + t.UserPrefix),
		plain(questions), template(t.EndOfTurn + t.TurnSeparator + t.AssistantPrefix),
	}
}

// Steps of a turn's partial segments (the generations before its last).
const (
	StepLengthRetry = "length_retry"      // a reply cut by the length limit, answered in the same turn
	StepSummary     = "handoff_summary"   // handoff step 1
	StepQuestions   = "handoff_questions" // handoff step 2
	StepAnswers     = "handoff_answers"   // handoff step 3
)
