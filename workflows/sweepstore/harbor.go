package sweepstore

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/harborout"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// LatestReport is a sweep's newest report: its last resume round's (round
// > 0), else its own (round 0). A sweep without one wraps store.ErrNotFound.
func LatestReport(ctx context.Context, st store.Store, sweepID string) (rep workflows.EvalReport, ref store.Ref, round int, err error) {
	key := workflows.EvalReportKey(sweepID)
	for n := 1; ; n++ {
		k := workflows.EvalResumeReportKey(sweepID, n)
		if _, err := st.Lookup(ctx, k); err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				return rep, ref, 0, err
			}
			break
		}
		key, round = k, n
	}
	if ref, err = st.Lookup(ctx, key); err != nil {
		return rep, ref, round, fmt.Errorf("%s: %w", key, err)
	}
	err = store.GetJSON(ctx, st, ref, &rep)
	return rep, ref, round, err
}

// ObservationCap bounds one turn's output in a trajectory, as Terminus-2
// caps what it shows the model.
const ObservationCap = 64 << 10

// HarborTimes are the times Temporal knows (zero where it does not): the
// sweep's start and close, and each rollout workflow's by its ID.
type HarborTimes struct {
	Started, Finished time.Time
	Rollouts          map[string][2]time.Time
}

// HarborJob turns a report into Harbor's job: one trial per rollout, its
// steps read from the rollout's record and its instruction from the task's
// bundle. source names the dataset (the pool or tasks directory).
func HarborJob(ctx context.Context, st store.Store, rep workflows.EvalReport, source string, times HarborTimes) (harborout.Job, error) {
	j := harborout.Job{
		ID: rep.SweepID, StartedAt: times.Started, FinishedAt: times.Finished,
		Total: rep.Summary.Rollouts, Retries: rep.Summary.SandboxRetries,
	}
	instructions := map[string]string{}
	taskIDs := map[string]map[string]bool{} // task name -> task IDs: two tasks of one name get the ID in their trial names
	for _, r := range rep.Rollouts {
		if taskIDs[r.Name] == nil {
			taskIDs[r.Name] = map[string]bool{}
		}
		taskIDs[r.Name][r.TaskID] = true
	}
	for _, r := range rep.Rollouts {
		t := harborTrial(r, rep.Agent, source)
		if len(taskIDs[r.Name]) > 1 {
			t.Name = harborout.TrialName(r.Name, fmt.Sprintf("%.8s-%d", r.TaskID, r.Attempt))
		}
		if ts, ok := times.Rollouts[r.WorkflowID]; ok {
			t.StartedAt, t.FinishedAt = ts[0], ts[1]
		}
		if _, ok := instructions[r.TaskID]; !ok {
			text, err := instruction(ctx, st, r.TaskID)
			if err != nil {
				return j, fmt.Errorf("task %s (%s): %w", r.Name, r.TaskID, err)
			}
			instructions[r.TaskID] = text
		}
		t.Instruction = instructions[r.TaskID]
		if r.Record != nil {
			var rec workflows.RolloutRecord
			if err := store.GetJSON(ctx, st, *r.Record, &rec); err != nil {
				return j, fmt.Errorf("rollout %s: record: %w", r.RolloutID, err)
			}
			steps, err := harborSteps(ctx, st, rec.Turns)
			if err != nil {
				return j, fmt.Errorf("rollout %s: %w", r.RolloutID, err)
			}
			t.Steps = steps
			if rec.Verify != nil {
				t.VerifierOutput = rec.Verify.Preview
			}
		}
		if r.Trajectory != nil {
			if err := addTokens(ctx, st, *r.Trajectory, t.Steps); err != nil {
				return j, fmt.Errorf("rollout %s: trajectory: %w", r.RolloutID, err)
			}
		}
		j.Trials = append(j.Trials, t)
	}
	return j, nil
}

// harborTrial is r without its steps and instruction.
func harborTrial(r workflows.RolloutResult, agent activities.AgentSpec, source string) harborout.Trial {
	t := harborout.Trial{
		Name: harborout.TrialName(r.Name, fmt.Sprint(r.Attempt)), TaskName: r.Name, TaskPath: r.Name,
		TaskChecksum: r.TaskID, Source: source, Agent: harborAgentName(agent), AgentVersion: "t1flow",
		Model: agent.Model, ExceptionType: r.ErrorType(),
		Extra: map[string]any{"t1flow": map[string]any{
			"rollout_id": r.RolloutID, "workflow_id": r.WorkflowID, "outcome": r.Outcome, "agent_end": r.AgentEnd,
			"scored": r.Scored, "reward": r.Reward, "passed": r.Passed, "total": r.Total, "turns": r.Turns,
			"policy_versions": r.PolicyVersions,
		}},
	}
	t.LLM = agent.Kind == activities.AgentPolicy || agent.Kind == activities.AgentChat
	if agent.Kind == activities.AgentPolicy && len(r.PolicyVersions) > 0 {
		t.Model = strings.Join(r.PolicyVersions, "+")
	}
	if t.ExceptionType != "" {
		t.ExceptionMessage = r.Error
		if t.ExceptionMessage == "" {
			t.ExceptionMessage = "agent phase ended: " + r.AgentEnd
		}
	}
	// A verifier_error (scored 0 here) is Harbor's verifier timeout: its
	// exception and no valid reward, which Harbor's Mean counts as 0.
	if r.Scored && r.Outcome != workflows.OutcomeVerifierError {
		v := workflows.HarborRewardOf(r)
		t.Reward = &v
		if _, one := r.HarborRewards["reward"]; len(r.HarborRewards) > 1 || len(r.HarborRewards) == 1 && !one {
			// Harbor's rewards dict as the task's reward.json wrote it.
			t.Rewards = r.HarborRewards
		}
	}
	return t
}

// harborAgentName is the agent as Harbor names it (oracle, nop,
// terminus-2); t1flow's own agents keep a t1flow- prefix.
func harborAgentName(a activities.AgentSpec) string {
	switch {
	case a.Kind == activities.AgentOracle || a.Kind == activities.AgentNop:
		return a.Kind
	case (a.Kind == activities.AgentPolicy || a.Kind == activities.AgentChat) && a.Terminus2():
		return "terminus-2"
	}
	return "t1flow-" + a.Kind
}

func harborSteps(ctx context.Context, st store.Store, turns []activities.TurnResult) ([]harborout.Step, error) {
	var out []harborout.Step
	for _, tr := range turns {
		s := harborout.Step{Keystrokes: tr.Command, Output: tr.Preview, ExitCode: tr.ExitCode}
		if tr.ParseError != "" {
			s.Message = "parse error: " + tr.ParseError
		}
		if tr.Output != nil {
			b, err := st.Get(ctx, *tr.Output)
			if err != nil {
				return nil, fmt.Errorf("turn %d output: %w", tr.Turn, err)
			}
			if len(b) > ObservationCap {
				b = append(b[:ObservationCap:ObservationCap], []byte(fmt.Sprintf("\n[... %d bytes more]", len(b)-ObservationCap))...)
			}
			s.Output = string(b)
		}
		out = append(out, s)
	}
	return out, nil
}

// instruction is instruction.md from the task's bundle (tasks/<id>.tar).
func instruction(ctx context.Context, st store.Store, taskID string) (string, error) {
	ref, err := st.Lookup(ctx, "tasks/"+taskID+".tar")
	if err != nil {
		return "", fmt.Errorf("bundle: %w", err)
	}
	b, err := st.Get(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("bundle: %w", err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("bundle %s has no instruction.md", ref.URI)
		}
		if err != nil {
			return "", fmt.Errorf("bundle %s: %w", ref.URI, err)
		}
		if path.Clean(h.Name) == "instruction.md" {
			text, err := io.ReadAll(tr)
			return string(text), err
		}
	}
}
