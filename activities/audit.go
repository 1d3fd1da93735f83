package activities

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// AuditLeakSeen reads what the audit's leak seeker reported in its rollout
// (the record's turn output): one "leak: FILE holds VALUE, written to PATH"
// line per value it found in the image and wrote where the tests look.
func (a *Activities) AuditLeakSeen(ctx context.Context, record store.Ref) ([]string, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	var rec struct {
		Turns []struct {
			Preview string     `json:"preview"`
			Output  *store.Ref `json:"output"`
		} `json:"turns"`
	}
	if err := store.GetJSON(ctx, a.Store, record, &rec); err != nil {
		return nil, errs.Infraf("read the leak seeker's record %s: %v", record.URI, err)
	}
	var out []string
	for _, t := range rec.Turns {
		text := t.Preview
		if t.Output != nil {
			b, err := a.Store.Get(ctx, *t.Output)
			if err != nil {
				return nil, errs.Infraf("read the leak seeker's output %s: %v", t.Output.URI, err)
			}
			text = string(b)
		}
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "leak: ") && len(out) < 20 {
				out = append(out, strings.TrimPrefix(l, "leak: "))
			}
		}
	}
	return out, nil
}

// AuditJudgeInput asks the judge model about one task.
type AuditJudgeInput struct {
	Task   task.Ref     `json:"task"`
	Config audit.Config `json:"config"`
}

// AuditJudge asks the configured judge model for its verdict on the
// instruction and hidden requirements. An endpoint that fails is an
// InfraError (retried); an answer that cannot be used is a verdict with
// Error set, and the executable checks decide alone.
func (a *Activities) AuditJudge(ctx context.Context, in AuditJudgeInput) (audit.ModelVerdict, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return audit.ModelVerdict{}, err
	}
	tests, err := audit.TestSources(t)
	if err != nil {
		return audit.ModelVerdict{}, errs.TaskInvalidf("%s: %v", in.Task.Name, err)
	}
	chat := &inference.ChatClient{BaseURL: in.Config.JudgeEndpoint, Model: in.Config.JudgeModel}
	if in.Config.JudgeAPIKeyEnv != "" {
		chat.APIKey = os.Getenv(in.Config.JudgeAPIKeyEnv)
	}
	reply, err := chat.Ask(ctx, audit.JudgePrompt(t.Instruction, tests), 1024, 0)
	if err != nil {
		return audit.ModelVerdict{}, errs.Infraf("judge endpoint %s (model %q): %v", chat.Endpoint(), in.Config.JudgeModel, err)
	}
	v, err := audit.ParseModelVerdict(reply, t.Instruction, tests)
	v.Model = in.Config.JudgeModel
	if err != nil {
		v.Error = err.Error()
	}
	return v, nil
}
