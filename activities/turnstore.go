package activities

import (
	"context"
	"fmt"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/text"
)

// TurnKey is where a turn's whole result is stored: per rollout, sandbox
// (a fresh sandbox starts the episode over) and turn.
func TurnKey(rolloutID, sandboxName string, turn int) string {
	return fmt.Sprintf("rollouts/%s/turns/%s/%05d.json", ids.Clean(rolloutID), ids.Clean(sandboxName), turn)
}

// SlimCommandBytes caps the command a slim turn result carries (for the
// workflow's current details; the stored turn has all of it).
const SlimCommandBytes = 200

// storeTurn stores res and returns what the rollout workflow needs to steer
// the episode; the rest is at TurnKey.
func (a *Activities) storeTurn(ctx context.Context, in TurnInput, res TurnResult) (TurnResult, error) {
	if _, err := store.PutJSON(ctx, a.Store, TurnKey(in.RolloutID, in.Sandbox.Name, in.Turn), res); err != nil {
		return res, errs.Infraf("store turn %d of %s: %v", in.Turn, in.RolloutID, err)
	}
	return TurnResult{
		Turn: res.Turn, Done: res.Done, Final: res.Final, EndReason: res.EndReason, Tokens: res.Tokens,
		Command: text.Truncate(res.Command, SlimCommandBytes), ExitCode: res.ExitCode, DurationMs: res.DurationMs,
		TimedOut: res.TimedOut, OutputBytes: res.OutputBytes,
	}, nil
}
