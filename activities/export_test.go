package activities

import (
	"context"
	"time"

	"github.com/t1flow/t1flow/harness"
)

// SetAfterSend installs the hook that runs right after a turn's command or
// keystrokes were sent, before anything is recorded: an error there is a
// worker that died mid-turn.
func SetAfterSend(a *Activities, f func(TurnInput) error) { a.afterSend = f }

// T2Step is the Terminus-2 terminal step, for the external tests; user is
// who the terminal runs as ("" for root).
func (a *Activities) T2Step(ctx context.Context, s *harness.Spec, id, user string, setup bool, cmds []harness.Keys, budget time.Duration) (string, error) {
	obs, _, err := a.t2Step(ctx, s, id, user, setup, cmds, budget, nil)
	return obs, err
}
