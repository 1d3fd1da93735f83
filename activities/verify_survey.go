package activities

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/steptime"
	"github.com/t1flow/t1flow/sandbox"
)

// survey runs ToolchainSurveyCmd: the number of sockets the agent's
// processes serve, which are then left running, or 0 once they are all
// stopped. A survey that gave no answer (killed by the agent's processes, or
// no room under the pids limit) stops them the old way, and refused says why.
// Either, as it ends, gives PID 1 back oom_score_adj 0 (sandbox.WithPID1OOMReset).
//
// A sandbox at its pids limit (a fork bomb) has no room for the exec to
// start now and then, but its processes come and go: the survey is tried
// again, up to SurveyTries times SurveyGap apart, before its service is
// taken for none.
func (a *Activities) survey(ctx context.Context, id string) (serving int, refused string, err error) {
	for try := 1; ; try++ {
		var stdout bytes.Buffer
		er, err := a.sealedExec(ctx, id, sandbox.WithPID1OOMReset(sandbox.ToolchainSurveyCmd()), "/", time.Minute, "prepare", &stdout)
		if err != nil {
			return 0, "", err
		}
		if n, ok := sandbox.ParseSurvey(stdout.String()); ok {
			return n, "", nil
		}
		if try >= SurveyTries {
			refused = fmt.Sprintf("the survey of the sandbox's sockets gave no answer in %d tries (the last: exit %d: %.200s): verified kill-first", try, er.ExitCode, strings.TrimSpace(er.Output))
			fmt.Fprintf(a.Docker.Log, "sandbox: %s: %s\n", id, refused)
			break
		}
		end := steptime.Start(ctx, StepSurveyAgain)
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(SurveyGap):
		}
		end()
	}
	return 0, refused, a.killAgent(ctx, id)
}

// SurveyTries and SurveyGap: how often survey tries a sandbox whose exec
// gave no answer, and how far apart.
var (
	SurveyTries = 20
	SurveyGap   = 250 * time.Millisecond
)

// killAgent stops every agent process (ToolchainKillCmd) and gives PID 1 back
// oom_score_adj 0.
func (a *Activities) killAgent(ctx context.Context, id string) error {
	_, err := a.sealedExec(ctx, id, sandbox.WithPID1OOMReset(sandbox.ToolchainKillCmd()), "/", time.Minute, "prepare", nil)
	return err
}
