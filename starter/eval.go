package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/sweepstore"
)

// evalFlags are the flags of `starter eval`.
type evalFlags struct {
	tasks                 taskSource
	agent                 string
	commands              multiFlag
	inference             string
	endpoint, model       string
	apiKeyEnv             string
	maxNew, maxContext    int
	temperature           float64
	harness               string
	attempts, concurrency int
	turnCap, s            int
	agentTimeout          time.Duration
	wait, asJSON          bool
	id                    string
	fresh                 bool
	storeDir              string
	checkpoints           string
	force                 bool
	resume                string
	filterTypes           multiFlag
	explicit              map[string]bool // the flags given
}

func parseEval(args []string) (*evalFlags, error) {
	f := &evalFlags{}
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	f.tasks.register(fs, "", "an imported pool", "a task directory or a directory of them")
	fs.StringVar(&f.agent, "agent", "oracle", "oracle, nop, scripted, policy or chat")
	fs.Var(&f.commands, "command", "a command for the scripted agent, one per turn (repeat the flag)")
	fs.StringVar(&f.inference, "inference", "", "policy: SGLang-compatible server URLs, comma-separated (default: the local worker's, from <home>/inference.url)")
	fs.StringVar(&f.endpoint, "endpoint", "", "chat: base URL of an OpenAI-compatible API")
	fs.StringVar(&f.model, "model", "", "chat: model name")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "OPENAI_API_KEY", "chat: environment variable on the sandbox hosts that holds the API key")
	fs.IntVar(&f.maxNew, "max-new-tokens", 0, "policy/chat: a cap on tokens per turn (0: none beyond the context on terminus-2, as Harbor; 512 on the short harness)")
	fs.Float64Var(&f.temperature, "temperature", 1.0, "policy/chat: sampling temperature (chat: sent only when given, as Harbor leaves it to the model)")
	fs.IntVar(&f.maxContext, "max-context", 0, "policy: context limit in tokens (0: the model's)")
	fs.StringVar(&f.harness, "harness", "terminus-2", "policy/chat: terminus-2 (Harbor's Terminus-2, docs/harness.md) or short (t1flow's 4-line prompt, for tiny policies)")
	fs.IntVar(&f.attempts, "attempts", 1, "attempts per task")
	fs.IntVar(&f.concurrency, "concurrency", workflows.DefaultEvalConcurrency, "rollouts at once")
	fs.IntVar(&f.turnCap, "turn-cap", workflows.EvalTurnCap, "turn cap per rollout")
	fs.IntVar(&f.s, "s", workflows.DefaultS, "S: reward = passing assertions / S")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", 0, "override each task's agent.timeout_sec")
	fs.BoolVar(&f.wait, "wait", false, "wait for the sweep and print the table")
	fs.BoolVar(&f.asJSON, "json", false, "wait and print one JSON document (see docs/eval-json.md)")
	fs.StringVar(&f.id, "id", "", "sweep ID (default: derived from tasks, agent and settings, so a re-run finds the existing sweep)")
	fs.BoolVar(&f.fresh, "new", false, "start a new sweep even if one with the same inputs exists")
	fs.StringVar(&f.storeDir, "store", config.StoreDir(), "artifact store directory")
	fs.StringVar(&f.checkpoints, "checkpoint", "", "evaluate these checkpoints one after another with the policy agent: CAMPAIGN:LABEL (init, sft, warmup, step-0003, latest), a saved checkpoint's name, or a directory with manifest.json; comma-separated")
	fs.BoolVar(&f.force, "force", false, "--checkpoint: load weights even into servers a running campaign samples from")
	fs.StringVar(&f.resume, "resume", "", "rerun the unfinished and errored rollouts of this finished sweep (its ID), keeping the others (docs/sweeps.md)")
	fs.Var(&f.filterTypes, "filter-error-type", "--resume: rerun rollouts with this error type (repeat; default "+strings.Join(workflows.DefaultResumeErrorTypes, ", ")+" and "+workflows.DefaultResumeNote+"; any of "+strings.Join(workflows.ErrorTypes, ", ")+")")
	fs.Var(&f.filterTypes, "f", "short for --filter-error-type")
	if _, err := parse(fs, args); err != nil {
		return nil, err
	}
	f.explicit = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.explicit[fl.Name] = true })
	if err := f.checkResume(f.explicit); err != nil {
		return nil, err
	}
	if f.checkpoints != "" {
		if f.explicit["agent"] && f.agent != activities.AgentPolicy {
			return nil, badInput(fmt.Errorf("eval: --checkpoint evaluates the policy agent, not --agent %s", f.agent))
		}
		f.agent = activities.AgentPolicy
	}
	return f, nil
}

// agentSpec is the agent the flags describe; the policy agent defaults to
// the local gpu worker's inference server.
func (f *evalFlags) agentSpec() activities.AgentSpec {
	spec := activities.AgentSpec{Kind: f.agent, Commands: f.commands}
	switch f.agent {
	case activities.AgentPolicy:
		urls := f.inference
		if urls == "" {
			b, _ := os.ReadFile(filepath.Join(config.Home(), "inference.url"))
			urls = strings.TrimSpace(string(b))
		}
		for _, u := range strings.Split(urls, ",") {
			if u = strings.TrimSpace(u); u != "" {
				spec.Inference = append(spec.Inference, u)
			}
		}
		spec.MaxNewTokens, spec.Temperature, spec.MaxContext, spec.Harness = f.maxNew, f.temperature, f.maxContext, f.harness
	case activities.AgentChat:
		spec.Endpoint, spec.Model, spec.APIKeyEnv = f.endpoint, f.model, f.apiKeyEnv
		spec.MaxNewTokens, spec.Harness = f.maxNew, f.harness
		if f.explicit["temperature"] || f.harness == harness.Short {
			spec.Temperature = f.temperature
		}
	}
	return spec
}

func (f *evalFlags) check(spec activities.AgentSpec) error {
	switch {
	case (f.tasks.dir == "") == (f.tasks.pool == ""):
		return badInput(errors.New("eval: give exactly one of --tasks DIR or --pool NAME"))
	case f.attempts < 1:
		return badInput(fmt.Errorf("eval: --attempts %d must be at least 1", f.attempts))
	case f.concurrency < 1:
		return badInput(fmt.Errorf("eval: --concurrency %d must be at least 1", f.concurrency))
	case f.turnCap < 1:
		return badInput(fmt.Errorf("eval: --turn-cap %d must be at least 1", f.turnCap))
	case f.s < 1:
		return badInput(fmt.Errorf("eval: --s %d must be at least 1", f.s))
	}
	if err := spec.Validate(); err != nil {
		return badInput(fmt.Errorf("eval: --%v", err))
	}
	return nil
}

// eval runs an eval sweep, or with --checkpoint one sweep per checkpoint.
// Every input is checked before anything starts.
func eval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "export" {
		return evalExport(ctx, args[1:], stdout, stderr)
	}
	f, err := parseEval(args)
	if err != nil {
		return err
	}
	if f.resume != "" {
		return evalResume(ctx, f, f.explicit, stdout, stderr)
	}
	spec := f.agentSpec()
	if err := f.check(spec); err != nil {
		return err
	}
	st, refs, err := openTasks(ctx, f.storeDir, f.tasks, "eval", stderr)
	if err != nil {
		return err
	}
	in := workflows.EvalSweepInput{
		Tasks: refs, Agent: spec, Attempts: f.attempts, Concurrency: f.concurrency,
		TurnCap: f.turnCap, S: f.s, AgentTimeoutSec: f.agentTimeout.Seconds(),
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var cks []workflows.NamedCheckpoint
	var trainer *gpu.TrainerRef
	if f.checkpoints != "" {
		if cks, trainer, err = resolveCheckpoints(ctx, c, st, f.checkpoints); err != nil {
			return err
		}
		if !f.force {
			if err := inferenceInUse(ctx, c, spec.Inference); err != nil {
				return err
			}
		}
	}
	in.SweepID = f.id
	if in.SweepID == "" {
		in.SweepID = freshID(sweepID(in, cks), f.fresh)
	}
	if in.TaskManifest, err = largeManifest(ctx, st, "evals/"+ids.Clean(in.SweepID)+"/tasks.json", in.SweepID, &in.Tasks); err != nil {
		return err
	}
	if len(cks) > 0 {
		return startCheckpointEval(ctx, c, workflows.CheckpointEvalInput{SweepID: in.SweepID, Checkpoints: cks, Eval: in, Trainer: trainer},
			len(refs), f.wait, f.asJSON, stdout, stderr)
	}
	return runSweep(ctx, c, st, in, len(refs), f, stdout, stderr)
}

// InlineTaskLimit is the most tasks a sweep's start request carries inline.
// A task ref is about 300 bytes of JSON and Temporal refuses a payload over
// 2 MB (its default blob limit), so a larger task set goes to the store as a
// manifest (a task.Pool, the sweep's task_manifest), which the sweep reads a
// page at a time.
var InlineTaskLimit = 1000

// largeManifest stores *tasks as the manifest at key when there are more than
// InlineTaskLimit, and then empties *tasks; nil when they stay inline.
func largeManifest(ctx context.Context, st store.Store, key, name string, tasks *[]task.Ref) (*store.Ref, error) {
	if len(*tasks) <= InlineTaskLimit {
		return nil, nil
	}
	ref, err := store.PutJSON(ctx, st, key, task.Pool{Name: name, Tasks: *tasks})
	if err != nil {
		return nil, fmt.Errorf("store the task manifest %s: %w", key, err)
	}
	*tasks = nil
	return &ref, nil
}

// runSweep starts (or finds) one sweep and, when asked, waits and prints it.
func runSweep(ctx context.Context, c client.Client, st store.Store, in workflows.EvalSweepInput, n int, f *evalFlags, stdout, stderr io.Writer) error {
	wid := ids.EvalSweepWorkflowID(in.SweepID)
	run, existing, err := startOrFind(ctx, c, wid, client.StartWorkflowOptions{
		ID:            wid,
		TaskQueue:     ids.ControlQueue,
		StaticSummary: fmt.Sprintf("eval %d tasks × %d, agent %s", n, f.attempts, f.agent),
	}, workflows.EvalSweepWorkflow, in)
	if err != nil {
		return fmt.Errorf("start eval sweep: %w", err)
	}
	announce(infoOut(f.asJSON, stdout, stderr), wid, existing, fmt.Sprintf("found existing sweep %s (use --new for another)", wid),
		fmt.Sprintf("eval sweep %s: %d tasks × %d attempts, agent %s", wid, n, f.attempts, f.agent))
	if !f.wait && !f.asJSON {
		return nil
	}
	var res workflows.EvalSweepResult
	if err := waitWithProgress(ctx, c, run, stderr, "rollouts done", &res); err != nil {
		return err
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return fmt.Errorf("read eval report: %w", err)
	}
	// A sweep that was resumed since reads as its last round has it.
	if latest, ref, round, err := sweepstore.LatestReport(ctx, st, in.SweepID); err == nil && round > 0 {
		rep, res.Report = latest, ref
		fmt.Fprintf(infoOut(f.asJSON, stdout, stderr), "as of resume %d (%s)\n", round, ids.EvalResumeWorkflowID(in.SweepID, round))
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(evalJSON(rep, res.Report))
	}
	printTable(stdout, rep)
	fmt.Fprintf(stdout, "report: %s\n", res.Report.URI)
	return nil
}

// sweepID derives the ID from what the sweep computes, so the same request
// finds the same sweep.
func sweepID(in workflows.EvalSweepInput, cks []workflows.NamedCheckpoint) string {
	h := sha256.New()
	prefix := in.Agent.Kind
	for _, ck := range cks {
		fmt.Fprintln(h, ck.Label, ck.Checkpoint.Name, ck.Checkpoint.WeightVersion, ck.Checkpoint.Files["manifest.json"].SHA256)
		prefix = "ckpt"
	}
	for _, t := range in.Tasks {
		fmt.Fprintln(h, t.ID)
	}
	b, _ := json.Marshal([]any{in.Agent, in.Attempts, in.TurnCap, in.S, in.AgentTimeoutSec})
	h.Write(b)
	return fmt.Sprintf("%s-%s", prefix, hex.EncodeToString(h.Sum(nil))[:12])
}

// EvalJSONTask is one rollout row of `starter eval --json` (docs/eval-json.md).
type EvalJSONTask struct {
	Name       string  `json:"name"`
	TaskID     string  `json:"task_id"`
	Category   string  `json:"category"`
	Difficulty string  `json:"difficulty"`
	Attempt    int     `json:"attempt"`
	Reward     float64 `json:"reward"`
	Passed     int     `json:"passed"`
	Total      int     `json:"total"`
	Resolved   bool    `json:"resolved"`
	Scored     bool    `json:"scored"`
	Outcome    string  `json:"outcome"`
	AgentEnd   string  `json:"agent_end"`
	Turns      int     `json:"turns"`
	DurationS  float64 `json:"duration_s"`
	RolloutID  string  `json:"rollout_id"`
	Error      string  `json:"error,omitempty"`
}

// EvalJSON is the document `starter eval --json` prints.
type EvalJSON struct {
	WorkflowID   string  `json:"workflow_id"`
	SweepID      string  `json:"sweep_id"`
	Agent        string  `json:"agent"`
	Attempts     int     `json:"attempts"`
	S            int     `json:"s"`
	ResolvedRate float64 `json:"resolved_rate"`
	// ScoredResolvedRate is over the scored alone; Unscored are counted
	// as 0 in ResolvedRate.
	ScoredResolvedRate float64                    `json:"scored_resolved_rate"`
	Unscored           int                        `json:"unscored"`
	HarborMeanReward   float64                    `json:"harbor_mean_reward"`
	PassAtK            map[string]float64         `json:"pass_at_k,omitempty"`
	MeanReward         float64                    `json:"mean_reward"`
	Rollouts           int                        `json:"rollouts"`
	Scored             int                        `json:"scored"`
	Resolved           int                        `json:"resolved"`
	MeanTurns          float64                    `json:"mean_turns"`
	Outcomes           map[string]int             `json:"outcomes"`
	Tampered           int                        `json:"tampered"`
	ByCategory         map[string]workflows.Group `json:"by_category"`
	ByDifficulty       map[string]workflows.Group `json:"by_difficulty"`
	Tasks              []EvalJSONTask             `json:"tasks"`
	Report             store.Ref                  `json:"report"`
}

func evalJSON(rep workflows.EvalReport, ref store.Ref) EvalJSON {
	s := rep.Summary
	out := EvalJSON{
		WorkflowID: rep.WorkflowID, SweepID: rep.SweepID, Agent: rep.Agent.Kind, Attempts: rep.Attempts, S: rep.S,
		ResolvedRate: s.ResolvedRate, MeanReward: s.MeanReward, Rollouts: s.Rollouts, Scored: s.Scored,
		ScoredResolvedRate: s.ScoredResolvedRate, Unscored: s.Unscored, HarborMeanReward: s.HarborMeanReward, PassAtK: s.PassAtK,
		Resolved: s.Resolved, MeanTurns: s.MeanTurns, Outcomes: s.Outcomes, Tampered: s.Tampered,
		ByCategory: s.ByCategory, ByDifficulty: s.ByDifficulty, Tasks: []EvalJSONTask{}, Report: ref,
	}
	for _, r := range rep.Rollouts {
		out.Tasks = append(out.Tasks, EvalJSONTask{
			Name: r.Name, TaskID: r.TaskID, Category: r.Category, Difficulty: r.Difficulty, Attempt: r.Attempt,
			Reward: r.Reward, Passed: r.Passed, Total: r.Total, Resolved: r.Resolved, Scored: r.Scored,
			Outcome: r.Outcome, AgentEnd: r.AgentEnd, Turns: r.Turns, DurationS: r.DurationSec,
			RolloutID: r.RolloutID, Error: r.Error,
		})
	}
	return out
}

// passAtK lists pass@k in k's order ("pass@1 0.500, pass@2 0.750"), none
// when there is none.
func passAtK(m map[string]float64, none string) string {
	var ks []string
	for _, k := range []string{"1", "2", "4", "8", "16", "32", "64"} {
		if v, ok := m[k]; ok {
			ks = append(ks, fmt.Sprintf("pass@%s %.3f", k, v))
		}
	}
	if len(ks) == 0 {
		return none
	}
	return strings.Join(ks, ", ")
}

func printTable(w io.Writer, rep workflows.EvalReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tCATEGORY\tDIFFICULTY\t#\tOUTCOME\tPASSED\tREWARD\tTURNS\tSECONDS")
	for _, r := range rep.Rollouts {
		passed, reward := "-", "-"
		if r.Scored {
			passed, reward = fmt.Sprintf("%d/%d", r.Passed, r.Total), fmt.Sprintf("%.3f", r.Reward)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%.1f\n", r.Name, r.Category, r.Difficulty, r.Attempt, r.Outcome, passed, reward, r.Turns, r.DurationSec)
	}
	tw.Flush()
	s := rep.Summary
	fmt.Fprintf(w, "\nresolved %d/%d rollouts (%.1f%%; %d unscored counted as 0, %.1f%% of the %d scored), mean reward %.3f (S = %d), Harbor's mean reward %.3f, mean turns %.1f\n",
		s.Resolved, s.Rollouts, 100*s.ResolvedRate, s.Unscored, 100*s.ScoredResolvedRate, s.Scored, s.MeanReward, rep.S, s.HarborMeanReward, s.MeanTurns)
	if len(s.PassAtK) > 0 {
		fmt.Fprintln(w, passAtK(s.PassAtK, ""))
	}
	if s.Tampered > 0 {
		fmt.Fprintf(w, "tampered: %d (scored at reward 0; the paths are in each rollout's record)\n", s.Tampered)
	}
	if s.Disagreements > 0 {
		fmt.Fprintf(w, "reward file and tests disagree: %d (the reward file decides, as in Harbor; each rollout's disagreement says how)\n", s.Disagreements)
	}
	if s.Scored < s.Rollouts {
		fmt.Fprintf(w, "not scored: %v\n", s.Outcomes)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nGROUP\tRESOLVED\tRATE\tMEAN REWARD")
	for _, g := range []struct {
		label string
		m     map[string]workflows.Group
	}{{"category", s.ByCategory}, {"difficulty", s.ByDifficulty}} {
		for _, k := range sortedStrings(g.m) {
			v := g.m[k]
			fmt.Fprintf(tw, "%s=%s\t%d/%d\t%.1f%%\t%.3f\n", g.label, k, v.Resolved, v.Rollouts, 100*v.ResolvedRate, v.MeanReward)
		}
	}
	tw.Flush()
}
