package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/trajectory"
)

// RenderSFTInput turns a task's reference solution into an SFT sample.
type RenderSFTInput struct {
	Task      task.Ref `json:"task"`
	Inference []string `json:"inference"` // for the policy's tokenizer
	Campaign  string   `json:"campaign"`
	// Harness renders the turns (AgentSpec.Harness; empty: short).
	Harness string `json:"harness,omitempty"`
}

// RenderSFTResult is the sample's claim check.
type RenderSFTResult struct {
	Trajectory store.Ref `json:"trajectory"`
	Tokens     int       `json:"tokens"`
	LossTokens int       `json:"loss_tokens"`
}

// sftScreen is the terminal an SFT sample shows: a fresh shell's prompt,
// the one the short harness's SFT shows (harness.SFTPrompt).
const sftScreen = harness.SFTPrompt + "\n"

// RenderSFT renders the reference solution as the harness's turns: the same
// first prompt a rollout sees, then an assistant turn whose commands are the
// solution's steps and which marks the task complete, then the confirmation.
// Only the assistant's tokens are in the loss mask.
func (a *Activities) RenderSFT(ctx context.Context, in RenderSFTInput) (RenderSFTResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return RenderSFTResult{}, err
	}
	sol, err := os.ReadFile(filepath.Join(t.Dir, task.SolutionFile))
	if err != nil {
		return RenderSFTResult{}, errs.TaskInvalidf("%s: %v", task.SolutionFile, err)
	}
	pool, err := a.pool(in.Inference)
	if err != nil {
		return RenderSFTResult{}, err
	}
	session := "sft/" + in.Task.ID
	var ep episode // the policy's model info and chat template
	if err := ep.model(ctx, pool, a.modelFiles(), session); err != nil {
		return RenderSFTResult{}, err
	}
	var parts []harness.Pieces
	if in.Harness == harness.Terminus2 {
		spec, serr := a.harborSpec(ctx)
		if serr != nil {
			return RenderSFTResult{}, serr
		}
		parts, err = spec.SolutionTurns(ep.chat, t.Instruction, string(sol), sftScreen)
	} else {
		parts, err = harness.SolutionTurns(ep.chat, t.Instruction, string(sol))
	}
	if err != nil {
		return RenderSFTResult{}, errs.TaskInvalidf("%s: %v", task.SolutionFile, err)
	}
	var rec trajectory.Record
	for i, part := range parts {
		toks, err := tokenize(ctx, a.tokenizer(pool), session, part)
		if err != nil {
			return RenderSFTResult{}, err
		}
		m := uint8(i % 2) // prompt and glue are context; the assistant turns are learned
		for _, x := range toks {
			rec.Tokens = append(rec.Tokens, x)
			rec.LossMask = append(rec.LossMask, m)
			rec.Logprobs = append(rec.Logprobs, 0)
		}
	}
	pool.Forget(session)
	rec.Meta = map[string]string{"task_id": in.Task.ID, "kind": "sft"}
	b, err := rec.Encode()
	if err != nil {
		return RenderSFTResult{}, errs.Infraf("%v", err)
	}
	ref, err := a.Store.Put(ctx, fmt.Sprintf("campaigns/%s/sft/%s.safetensors", ids.Clean(in.Campaign), in.Task.ID), strings.NewReader(string(b)))
	if err != nil {
		return RenderSFTResult{}, errs.Infraf("store sft sample: %v", err)
	}
	res := RenderSFTResult{Trajectory: ref, Tokens: len(rec.Tokens)}
	for _, m := range rec.LossMask {
		res.LossTokens += int(m)
	}
	return res, nil
}
