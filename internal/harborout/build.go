package harborout

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// NewTrialResult is t's result.json. uri is where its directory is; fallback
// stands in for an exception's time when the trial's own times are unknown.
func NewTrialResult(t Trial, jobID, uri string, fallback time.Time) TrialResult {
	src := strPtr(t.Source)
	r := TrialResult{
		SchemaVersion: 1, ID: UUID("trial:" + jobID + "/" + t.Name),
		TaskName: t.TaskName, TrialName: t.Name, TrialURI: uri,
		TaskID: LocalTaskID{Path: t.TaskPath}, Source: src, TaskChecksum: t.TaskChecksum,
		Config: TrialConfig{
			Task: TaskConfig{Path: t.TaskPath, Source: src}, TrialName: t.Name, TrialsDir: ".",
			Agent: AgentConfig{Name: t.Agent, ModelName: strPtr(t.Model)}, JobID: UUID("job:" + jobID),
		},
		AgentInfo:   AgentInfo{Name: t.Agent, Version: t.AgentVersion},
		AgentResult: &AgentContext{NInputTokens: t.InputTokens, NOutputTokens: t.OutputTokens, Metadata: t.Extra},
		StartedAt:   timePtr(t.StartedAt), FinishedAt: timePtr(t.FinishedAt),
	}
	if t.Model != "" {
		r.AgentInfo.ModelInfo = &ModelInfo{Name: t.Model}
	}
	if rd := t.RewardDict(); rd != nil {
		r.RewardValid = true
		r.VerifierResult = &VerifierResult{Rewards: rd}
	}
	if t.ExceptionType != "" {
		at := t.FinishedAt
		if at.IsZero() {
			at = fallback
		}
		r.ExceptionInfo = &ExceptionInfo{
			ExceptionType: t.ExceptionType, ExceptionMessage: t.ExceptionMessage,
			ExceptionTraceback: "", OccurredAt: at.UTC().Format(time.RFC3339Nano),
		}
	}
	if !t.StartedAt.IsZero() {
		r.AgentExecution = &TimingInfo{StartedAt: timePtr(t.StartedAt), FinishedAt: timePtr(t.FinishedAt)}
	}
	return r
}

// NewJobResult is the job's result.json, its stats computed as Harbor's
// JobStats.increment computes them, its metrics as Harbor's Mean metric
// (aggregate_reward_dicts: a trial without a reward counts as 0; one
// "mean" when the trials name at most one key, else a mean per key with a
// missing key as 0) and pass@k as harbor.utils.pass_at_k.
func NewJobResult(j Job) JobResult {
	st := JobStats{NCompletedTrials: len(j.Trials), NRetries: j.Retries, Evals: map[string]*AgentDatasetStats{}}
	groups := map[string][]Trial{}
	for _, t := range j.Trials {
		key := t.EvalsKey()
		groups[key] = append(groups[key], t)
		e := st.Evals[key]
		if e == nil {
			e = &AgentDatasetStats{Metrics: []map[string]any{},
				RewardStats: map[string]map[string][]string{}, ExceptionStats: map[string][]string{}}
			st.Evals[key] = e
		}
		if rd := t.RewardDict(); rd != nil {
			e.NTrials++
			for k, v := range rd {
				rs := e.RewardStats[k]
				if rs == nil {
					rs = map[string][]string{}
					e.RewardStats[k] = rs
				}
				rs[pyFloat(v)] = append(rs[pyFloat(v)], t.Name)
			}
		}
		if t.ExceptionType != "" {
			e.ExceptionStats[t.ExceptionType] = append(e.ExceptionStats[t.ExceptionType], t.Name)
			e.NErrors++
			st.NErroredTrials++
		}
		st.NInputTokens = addPtr(st.NInputTokens, t.InputTokens)
		st.NOutputTokens = addPtr(st.NOutputTokens, t.OutputTokens)
	}
	for key, e := range st.Evals {
		e.Metrics = append(e.Metrics, meanMetric(groups[key]))
		e.PassAtK = passAtK(groups[key])
	}
	st.NPendingTrials = max(j.Total-st.NCompletedTrials, 0)
	updated := j.FinishedAt
	if updated.IsZero() {
		updated = j.StartedAt
	}
	return JobResult{
		SchemaVersion: 1, ID: UUID("job:" + j.ID), StartedAt: j.StartedAt.UTC().Format(time.RFC3339Nano),
		UpdatedAt: timePtr(updated), FinishedAt: timePtr(j.FinishedAt), NTotalTrials: j.Total, Stats: st,
	}
}

// meanMetric is Harbor's Mean over trials (harbor.metrics.base's
// aggregate_reward_dicts): with at most one reward key among them, {"mean":
// the mean of each trial's only value, 0 without}; else the mean of each
// key, 0 where a trial lacks it.
func meanMetric(trials []Trial) map[string]any {
	keys := map[string]bool{}
	for _, t := range trials {
		for k := range t.RewardDict() {
			keys[k] = true
		}
	}
	n := float64(len(trials))
	if len(keys) <= 1 {
		sum := 0.0
		for _, t := range trials {
			for _, v := range t.RewardDict() {
				sum += v
			}
		}
		return map[string]any{"mean": sum / n}
	}
	out := map[string]any{}
	for k := range keys {
		sum := 0.0
		for _, t := range trials {
			sum += t.RewardDict()[k]
		}
		out[k] = sum / n
	}
	return out
}

// NewTrajectory is t's agent/trajectory.json: the instruction as the user's
// step, then one agent step per turn, its keystrokes as Terminus-2's
// bash_command tool call and the terminal's answer as the observation.
func NewTrajectory(t Trial, jobID string) Trajectory {
	tr := Trajectory{
		SchemaVersion: ATIFSchema, SessionID: UUID("trial:" + jobID + "/" + t.Name),
		Agent: ATIFAgent{Name: t.Agent, Version: t.AgentVersion, ModelName: t.Model},
		Steps: []ATIFStep{{StepID: 1, Source: "user", Message: t.Instruction}},
	}
	total, model := 0, t.LLM || t.Model != ""
	for i, s := range t.Steps {
		st := ATIFStep{StepID: i + 2, Timestamp: timePtr(s.At), Source: "agent", Message: s.Message}
		var result ObservationResult
		if s.Keystrokes != "" {
			id := fmt.Sprintf("call_%d_1", i+1)
			st.ToolCalls = []ToolCall{{ToolCallID: id, FunctionName: "bash_command", Arguments: map[string]any{"keystrokes": s.Keystrokes}}}
			result.SourceCallID = &id
		}
		result.Content = s.Output
		result.Extra = map[string]any{"exit_code": s.ExitCode}
		st.Observation = &Observation{Results: []ObservationResult{result}}
		if model {
			n := len(s.TokenIDs)
			total += n
			if n > 0 {
				st.Metrics = &Metrics{CompletionTokens: &n, CompletionTokenIDs: s.TokenIDs, Logprobs: s.Logprobs}
			}
		} else {
			zero := 0 // a scripted agent's step is a deterministic dispatch, not an LLM call
			st.LLMCallCount = &zero
		}
		tr.Steps = append(tr.Steps, st)
	}
	tr.FinalMetrics = &FinalMetrics{TotalSteps: len(tr.Steps)}
	if model && total > 0 {
		tr.FinalMetrics.TotalCompletionTokens = &total
	}
	return tr
}

// pyFloat writes v as Python's json writes a float dict key (1.0, 0.25).
func pyFloat(v float64) string {
	if v == math.Trunc(v) && !math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func addPtr(sum, v *int) *int {
	if v == nil {
		return sum
	}
	n := *v
	if sum != nil {
		n += *sum
	}
	return &n
}
