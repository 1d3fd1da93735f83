package harborout

// The documents below follow harbor 0.26.0's pydantic models field for
// field (their JSON names); optional fields t1flow has no value for are left
// out, as Harbor's own writer leaves them null.

// TrialResult is harbor.models.trial.result.TrialResult.
type TrialResult struct {
	SchemaVersion  int             `json:"schema_version"`
	ID             string          `json:"id"`
	TaskName       string          `json:"task_name"`
	TrialName      string          `json:"trial_name"`
	TrialURI       string          `json:"trial_uri"`
	TaskID         LocalTaskID     `json:"task_id"`
	Source         *string         `json:"source"`
	TaskChecksum   string          `json:"task_checksum"`
	Config         TrialConfig     `json:"config"`
	AgentInfo      AgentInfo       `json:"agent_info"`
	AgentResult    *AgentContext   `json:"agent_result"`
	VerifierResult *VerifierResult `json:"verifier_result"`
	ExceptionInfo  *ExceptionInfo  `json:"exception_info"`
	StartedAt      *string         `json:"started_at"`
	FinishedAt     *string         `json:"finished_at"`
	AgentExecution *TimingInfo     `json:"agent_execution"`
	// RewardValid is Harbor's computed field, written as Harbor writes it.
	RewardValid bool `json:"reward_valid"`
}

// LocalTaskID is harbor.models.task.id.LocalTaskId.
type LocalTaskID struct {
	Path string `json:"path"`
}

// TrialConfig is the part of harbor.models.trial.config.TrialConfig a
// reader needs; the rest takes Harbor's defaults.
type TrialConfig struct {
	Task      TaskConfig  `json:"task"`
	TrialName string      `json:"trial_name"`
	TrialsDir string      `json:"trials_dir"`
	Agent     AgentConfig `json:"agent"`
	JobID     string      `json:"job_id"`
}

// TaskConfig is harbor.models.trial.config.TaskConfig for a local task.
type TaskConfig struct {
	Path   string  `json:"path"`
	Source *string `json:"source"`
}

// AgentConfig is harbor.models.trial.config.AgentConfig (name and model).
type AgentConfig struct {
	Name      string  `json:"name"`
	ModelName *string `json:"model_name"`
}

// AgentInfo is harbor.models.trial.result.AgentInfo.
type AgentInfo struct {
	Name      string     `json:"name"`
	Version   string     `json:"version"`
	ModelInfo *ModelInfo `json:"model_info"`
}

// ModelInfo is harbor.models.trial.result.ModelInfo.
type ModelInfo struct {
	Name     string  `json:"name"`
	Provider *string `json:"provider"`
}

// AgentContext is harbor.models.agent.context.AgentContext.
type AgentContext struct {
	NInputTokens  *int           `json:"n_input_tokens"`
	NOutputTokens *int           `json:"n_output_tokens"`
	Metadata      map[string]any `json:"metadata,omitempty"`
}

// VerifierResult is harbor.models.verifier.result.VerifierResult.
type VerifierResult struct {
	Rewards map[string]float64 `json:"rewards"`
}

// ExceptionInfo is harbor.models.trial.result.ExceptionInfo.
type ExceptionInfo struct {
	ExceptionType      string `json:"exception_type"`
	ExceptionMessage   string `json:"exception_message"`
	ExceptionTraceback string `json:"exception_traceback"`
	OccurredAt         string `json:"occurred_at"`
}

// TimingInfo is harbor.models.trial.result.TimingInfo.
type TimingInfo struct {
	StartedAt  *string `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
}

// JobResult is harbor.models.job.result.JobResult, written as Harbor
// writes a job's result.json: without trial_results (each trial has its own).
type JobResult struct {
	SchemaVersion int      `json:"schema_version"`
	ID            string   `json:"id"`
	StartedAt     string   `json:"started_at"`
	UpdatedAt     *string  `json:"updated_at"`
	FinishedAt    *string  `json:"finished_at"`
	NTotalTrials  int      `json:"n_total_trials"`
	Stats         JobStats `json:"stats"`
}

// JobStats is harbor.models.job.result.JobStats.
type JobStats struct {
	NCompletedTrials int                           `json:"n_completed_trials"`
	NErroredTrials   int                           `json:"n_errored_trials"`
	NRunningTrials   int                           `json:"n_running_trials"`
	NPendingTrials   int                           `json:"n_pending_trials"`
	NCancelledTrials int                           `json:"n_cancelled_trials"`
	NRetries         int                           `json:"n_retries"`
	Evals            map[string]*AgentDatasetStats `json:"evals"`
	NInputTokens     *int                          `json:"n_input_tokens"`
	NOutputTokens    *int                          `json:"n_output_tokens"`
}

// AgentDatasetStats is harbor.models.job.result.AgentDatasetStats.
type AgentDatasetStats struct {
	NTrials int                `json:"n_trials"`
	NErrors int                `json:"n_errors"`
	Metrics []map[string]any   `json:"metrics"`
	PassAtK map[string]float64 `json:"pass_at_k"`
	// RewardStats: reward key -> reward value (as Harbor's JSON writes a
	// float key, "1.0") -> trial names.
	RewardStats    map[string]map[string][]string `json:"reward_stats"`
	ExceptionStats map[string][]string            `json:"exception_stats"`
}

// Trajectory is harbor.models.trajectories.Trajectory (ATIF).
type Trajectory struct {
	SchemaVersion string         `json:"schema_version"`
	SessionID     string         `json:"session_id"`
	Agent         ATIFAgent      `json:"agent"`
	Steps         []ATIFStep     `json:"steps"`
	FinalMetrics  *FinalMetrics  `json:"final_metrics,omitempty"`
	Extra         map[string]any `json:"extra,omitempty"`
}

// ATIFSchema is the ATIF version written (harbor 0.26.0's newest).
const ATIFSchema = "ATIF-v1.8"

// ATIFAgent is harbor.models.trajectories.agent.Agent.
type ATIFAgent struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	ModelName string `json:"model_name,omitempty"`
}

// ATIFStep is harbor.models.trajectories.step.Step.
type ATIFStep struct {
	StepID       int          `json:"step_id"`
	Timestamp    *string      `json:"timestamp,omitempty"`
	Source       string       `json:"source"` // system, user or agent
	Message      string       `json:"message"`
	ToolCalls    []ToolCall   `json:"tool_calls,omitempty"`
	Observation  *Observation `json:"observation,omitempty"`
	Metrics      *Metrics     `json:"metrics,omitempty"`
	LLMCallCount *int         `json:"llm_call_count,omitempty"`
}

// ToolCall is harbor.models.trajectories.tool_call.ToolCall.
type ToolCall struct {
	ToolCallID   string         `json:"tool_call_id"`
	FunctionName string         `json:"function_name"`
	Arguments    map[string]any `json:"arguments"`
}

// Observation is harbor.models.trajectories.observation.Observation.
type Observation struct {
	Results []ObservationResult `json:"results"`
}

// ObservationResult is harbor.models.trajectories.observation_result.ObservationResult.
type ObservationResult struct {
	SourceCallID *string        `json:"source_call_id,omitempty"`
	Content      string         `json:"content"`
	Extra        map[string]any `json:"extra,omitempty"`
}

// Metrics is harbor.models.trajectories.metrics.Metrics.
type Metrics struct {
	CompletionTokens   *int      `json:"completion_tokens,omitempty"`
	CompletionTokenIDs []int     `json:"completion_token_ids,omitempty"`
	Logprobs           []float64 `json:"logprobs,omitempty"`
}

// FinalMetrics is harbor.models.trajectories.final_metrics.FinalMetrics.
type FinalMetrics struct {
	TotalCompletionTokens *int `json:"total_completion_tokens,omitempty"`
	TotalSteps            int  `json:"total_steps"`
}
