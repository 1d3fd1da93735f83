// Command starter is the CLI for operators and starters: import and list
// tasks, run eval sweeps, and run the reaper now.
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
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

const usage = `usage: starter COMMAND [flags]

commands:
  tasks import DIR... --pool NAME   validate Harbor task directories and add them to a pool
  tasks list --pool NAME            list a pool's tasks
  tasks validate DIR...             validate task directories without importing them
  eval (--tasks DIR | --pool NAME) --agent oracle|nop|scripted|policy|chat
       [--command CMD]... [--inference URL[,URL...]] [--endpoint URL --model NAME]
       [--attempts K] [--concurrency N] [--wait] [--json] [--id ID] [--new]
       [--checkpoint REF[,REF...] [--force]]
                                    run an eval sweep; prints its workflow ID and UI link; with
                                    --checkpoint, one sweep per checkpoint and a comparison table
                                    (REF: CAMPAIGN:LABEL, a saved checkpoint's name, or a directory)
  synth --seeds DIR --rounds R --per-seed N --pool NAME [--rng-seed S] [--synthesizer procedural|llm]
                                    grow seed tasks by recursive synthesis into a pool
  audit (--pool NAME | --tasks DIR) --keep-pool NAME [--eval-tasks DIR] [--config FILE]
                                    audit tasks on eight dimensions; kept tasks go to the keep pool
  campaign start -f FILE [--wait] | status NAME | pause NAME | resume NAME | cancel NAME
           | set-concurrency NAME N | list
                                    run and steer a training campaign (SFT, critic warm-up, PPO, evals)
  report CAMPAIGN (--html FILE | --json)
                                    plots of reward, EV, log-prob gap, turns and evals per checkpoint
  trace ROLLOUT_ID|TASK_ID          a rollout's turns, assertions, reward, drift and routing reports
  reap [--host H] [--ttl D]         run the reaper for a sandbox host now

environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, T1FLOW_HOME, T1FLOW_STORE, T1FLOW_UI
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
	}
	os.Exit(code)
}

// exitError carries an exit code: 2 for bad input, 1 for everything else.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func badInput(err error) error { return &exitError{2, err} }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0, nil
	}
	var err error
	switch {
	case args[0] == "tasks" && len(args) > 1 && args[1] == "import":
		err = tasksImport(ctx, args[2:], stdout, stderr)
	case args[0] == "tasks" && len(args) > 1 && args[1] == "list":
		err = tasksList(ctx, args[2:], stdout)
	case args[0] == "tasks" && len(args) > 1 && args[1] == "validate":
		err = tasksValidate(args[2:], stdout, stderr)
	case args[0] == "eval":
		err = eval(ctx, args[1:], stdout, stderr)
	case args[0] == "synth":
		err = synthCmd(ctx, args[1:], stdout, stderr)
	case args[0] == "audit":
		err = auditCmd(ctx, args[1:], stdout, stderr)
	case args[0] == "campaign":
		err = campaignCmd(ctx, args[1:], stdout, stderr)
	case args[0] == "report":
		err = reportCmd(ctx, args[1:], stdout)
	case args[0] == "trace":
		err = trace(ctx, args[1:], stdout)
	case args[0] == "reap":
		err = reap(ctx, args[1:], stdout)
	default:
		fmt.Fprint(stderr, usage)
		return 2, fmt.Errorf("unknown command %q", strings.Join(args, " "))
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, ee.err
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// parse lets flags and positional arguments mix, as users type them.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, badInput(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func openStore(dir string) (store.Store, error) { return config.OpenStore(dir) }

// loadTasks validates every directory and returns all problems at once.
func loadTasks(dirs []string, stderr io.Writer) ([]*task.Task, error) {
	var all []*task.Task
	var errs []string
	for _, d := range dirs {
		ts, err := task.LoadAll(d)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		all = append(all, ts...)
	}
	if len(errs) > 0 {
		return nil, badInput(fmt.Errorf("invalid tasks, nothing was started:\n%s", strings.Join(errs, "\n")))
	}
	for _, t := range all {
		for _, w := range t.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
	}
	return all, nil
}

func tasksValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks validate", flag.ContinueOnError)
	dirs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return badInput(errors.New("tasks validate: name at least one task directory"))
	}
	ts, err := loadTasks(dirs, stderr)
	if err != nil {
		return err
	}
	for _, t := range ts {
		fmt.Fprintf(stdout, "ok  %s  %s\n", t.ID, t.Name)
	}
	return nil
}

func tasksImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks import", flag.ContinueOnError)
	pool := fs.String("pool", "", "pool name")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	dirs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *pool == "" || len(dirs) == 0 {
		return badInput(errors.New("usage: starter tasks import DIR... --pool NAME"))
	}
	if err := task.ValidatePoolName(*pool); err != nil {
		return badInput(err)
	}
	ts, err := loadTasks(dirs, stderr)
	if err != nil {
		return err
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	p, added, err := task.Import(ctx, st, *pool, ts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pool %s: %d tasks (%d new)\n", p.Name, len(p.Tasks), added)
	return nil
}

func tasksList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tasks list", flag.ContinueOnError)
	pool := fs.String("pool", "", "pool name")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *pool == "" {
		return badInput(errors.New("usage: starter tasks list --pool NAME"))
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	p, err := task.LoadPool(ctx, st, *pool)
	if errors.Is(err, store.ErrNotFound) {
		return badInput(fmt.Errorf("pool %q does not exist (import tasks with: starter tasks import DIR --pool %s)", *pool, *pool))
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(p)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCATEGORY\tDIFFICULTY")
	for _, t := range p.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Category, t.Difficulty)
	}
	return tw.Flush()
}

func eval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	tasksDir := fs.String("tasks", "", "a task directory or a directory of them")
	pool := fs.String("pool", "", "an imported pool")
	agent := fs.String("agent", "oracle", "oracle, nop, scripted, policy or chat")
	var commands multiFlag
	fs.Var(&commands, "command", "a command for the scripted agent, one per turn (repeat the flag)")
	inference := fs.String("inference", "", "policy: SGLang-compatible server URLs, comma-separated (default: the local worker's, from <home>/inference.url)")
	endpoint := fs.String("endpoint", "", "chat: base URL of an OpenAI-compatible API")
	model := fs.String("model", "", "chat: model name")
	apiKeyEnv := fs.String("api-key-env", "OPENAI_API_KEY", "chat: environment variable on the sandbox hosts that holds the API key")
	maxNew := fs.Int("max-new-tokens", 512, "policy/chat: tokens per turn")
	temperature := fs.Float64("temperature", 1.0, "policy/chat: sampling temperature")
	maxContext := fs.Int("max-context", 0, "policy: context limit in tokens (0: the model's)")
	attempts := fs.Int("attempts", 1, "attempts per task")
	concurrency := fs.Int("concurrency", workflows.DefaultEvalConcurrency, "rollouts at once")
	turnCap := fs.Int("turn-cap", workflows.EvalTurnCap, "turn cap per rollout")
	s := fs.Int("s", workflows.DefaultS, "S: reward = passing assertions / S")
	agentTimeout := fs.Duration("agent-timeout", 0, "override each task's agent.timeout_sec")
	wait := fs.Bool("wait", false, "wait for the sweep and print the table")
	asJSON := fs.Bool("json", false, "wait and print one JSON document (see docs/eval-json.md)")
	id := fs.String("id", "", "sweep ID (default: derived from tasks, agent and settings, so a re-run finds the existing sweep)")
	fresh := fs.Bool("new", false, "start a new sweep even if one with the same inputs exists")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	checkpoints := fs.String("checkpoint", "", "evaluate these checkpoints one after another with the policy agent: CAMPAIGN:LABEL (init, sft, warmup, step-0003, latest), a saved checkpoint's name, or a directory with manifest.json; comma-separated")
	force := fs.Bool("force", false, "--checkpoint: load weights even into servers a running campaign samples from")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *checkpoints != "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "agent" })
		if explicit && *agent != activities.AgentPolicy {
			return badInput(fmt.Errorf("eval: --checkpoint evaluates the policy agent, not --agent %s", *agent))
		}
		*agent = activities.AgentPolicy
	}
	spec := activities.AgentSpec{Kind: *agent, Commands: commands}
	switch *agent {
	case activities.AgentPolicy:
		urls := *inference
		if urls == "" {
			b, _ := os.ReadFile(filepath.Join(config.Home(), "inference.url"))
			urls = strings.TrimSpace(string(b))
		}
		for _, u := range strings.Split(urls, ",") {
			if u = strings.TrimSpace(u); u != "" {
				spec.Inference = append(spec.Inference, u)
			}
		}
		spec.MaxNewTokens, spec.Temperature, spec.MaxContext = *maxNew, *temperature, *maxContext
	case activities.AgentChat:
		spec.Endpoint, spec.Model, spec.APIKeyEnv = *endpoint, *model, *apiKeyEnv
		spec.MaxNewTokens, spec.Temperature = *maxNew, *temperature
	}
	switch {
	case (*tasksDir == "") == (*pool == ""):
		return badInput(errors.New("eval: give exactly one of --tasks DIR or --pool NAME"))
	case *attempts < 1:
		return badInput(fmt.Errorf("eval: --attempts %d must be at least 1", *attempts))
	case *concurrency < 1:
		return badInput(fmt.Errorf("eval: --concurrency %d must be at least 1", *concurrency))
	case *turnCap < 1:
		return badInput(fmt.Errorf("eval: --turn-cap %d must be at least 1", *turnCap))
	case *s < 1:
		return badInput(fmt.Errorf("eval: --s %d must be at least 1", *s))
	}
	if err := spec.Validate(); err != nil {
		return badInput(fmt.Errorf("eval: --%v", err))
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	var refs []task.Ref
	if *tasksDir != "" {
		ts, err := loadTasks([]string{*tasksDir}, stderr)
		if err != nil {
			return err
		}
		for _, t := range ts {
			r, err := task.Bundle(ctx, st, t)
			if err != nil {
				return err
			}
			refs = append(refs, r)
		}
		sort.Slice(refs, func(i, j int) bool { return refs[i].Name < refs[j].Name })
	} else {
		p, err := task.LoadPool(ctx, st, *pool)
		if errors.Is(err, store.ErrNotFound) {
			return badInput(fmt.Errorf("pool %q does not exist", *pool))
		}
		if err != nil {
			return err
		}
		refs = p.Tasks
	}
	in := workflows.EvalSweepInput{
		Tasks: refs, Agent: spec, Attempts: *attempts, Concurrency: *concurrency,
		TurnCap: *turnCap, S: *s, AgentTimeoutSec: agentTimeout.Seconds(),
	}
	c, err := config.Dial(ctx, slog.LevelError)
	if err != nil {
		return err
	}
	defer c.Close()
	var cks []workflows.NamedCheckpoint
	if *checkpoints != "" {
		if cks, err = resolveCheckpoints(ctx, c, st, *checkpoints); err != nil {
			return err
		}
		if !*force {
			if err := inferenceInUse(ctx, c, spec.Inference); err != nil {
				return err
			}
		}
	}
	in.SweepID = *id
	if in.SweepID == "" {
		in.SweepID = sweepID(in, cks)
		if *fresh {
			in.SweepID += "-" + time.Now().UTC().Format("20060102T150405")
		}
	}
	if len(cks) > 0 {
		return startCheckpointEval(ctx, c, workflows.CheckpointEvalInput{SweepID: in.SweepID, Checkpoints: cks, Eval: in},
			*wait, *asJSON, stdout, stderr)
	}
	wid := ids.EvalSweepWorkflowID(in.SweepID)
	run, existing, err := startOrFind(ctx, c, wid, client.StartWorkflowOptions{
		ID:            wid,
		TaskQueue:     ids.ControlQueue,
		StaticSummary: fmt.Sprintf("eval %d tasks × %d, agent %s", len(refs), *attempts, *agent),
	}, workflows.EvalSweepWorkflow, in)
	if err != nil {
		return fmt.Errorf("start eval sweep: %w", err)
	}
	info := stdout
	if *asJSON {
		info = stderr
	}
	if existing {
		fmt.Fprintf(info, "found existing sweep %s (use --new for another)\n", wid)
	} else {
		fmt.Fprintf(info, "eval sweep %s: %d tasks × %d attempts, agent %s\n", wid, len(refs), *attempts, *agent)
	}
	fmt.Fprintf(info, "  %s\n", config.UIURL(wid))
	if !*wait && !*asJSON {
		return nil
	}
	res, err := waitSweep(ctx, c, run, stderr)
	if err != nil {
		return err
	}
	var rep workflows.EvalReport
	if err := store.GetJSON(ctx, st, res.Report, &rep); err != nil {
		return fmt.Errorf("read eval report: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(evalJSON(rep, res.Report))
	}
	printTable(stdout, rep)
	fmt.Fprintf(stdout, "report: %s\n", res.Report.URI)
	return nil
}

// startOrFind starts a workflow unless one with the same ID is running or
// has completed; a failed, cancelled or terminated one is started afresh.
func startOrFind(ctx context.Context, c client.Client, wid string, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, bool, error) {
	d, err := c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return nil, false, err
	default:
		switch d.WorkflowExecutionInfo.Status {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			return c.GetWorkflow(ctx, wid, ""), true, nil
		}
	}
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	run, err := c.ExecuteWorkflow(ctx, opts, wf, args...)
	return run, false, err
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

func waitSweep(ctx context.Context, c client.Client, run client.WorkflowRun, stderr io.Writer) (workflows.EvalSweepResult, error) {
	var res workflows.EvalSweepResult
	err := waitWithProgress(ctx, c, run, stderr, "rollouts done", &res)
	return res, err
}

// waitWithProgress waits for a sweep-like workflow, printing its "progress"
// query as a line that updates (a line per change when not on a terminal).
func waitWithProgress(ctx context.Context, c client.Client, run client.WorkflowRun, stderr io.Writer, noun string, res any) error {
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, res) }()
	tty := isTerminal(stderr)
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case err := <-done:
			if tty && last != "" {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", run.GetID(), err)
			}
			return nil
		case <-t.C:
			v, err := c.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress)
			if err != nil {
				continue
			}
			var p workflows.EvalProgress
			if v.Get(&p) != nil {
				continue
			}
			counts := fmt.Sprintf("%d/%d %s, %d running, %d good", p.Done, p.Total, noun, p.Running, p.Resolved)
			line := fmt.Sprintf("%s, %s elapsed", counts, time.Since(start).Round(time.Second))
			if p.Done > 0 && p.Done < p.Total {
				eta := time.Duration(float64(time.Since(start)) / float64(p.Done) * float64(p.Total-p.Done))
				line += fmt.Sprintf(", ETA %s", eta.Round(time.Second))
			}
			if tty {
				fmt.Fprintf(stderr, "\r%-100s", line)
			} else if counts != last {
				fmt.Fprintln(stderr, line) // off a terminal, a line only when the counts change
			}
			last = counts
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
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
	WorkflowID   string                     `json:"workflow_id"`
	SweepID      string                     `json:"sweep_id"`
	Agent        string                     `json:"agent"`
	Attempts     int                        `json:"attempts"`
	S            int                        `json:"s"`
	ResolvedRate float64                    `json:"resolved_rate"`
	MeanReward   float64                    `json:"mean_reward"`
	Rollouts     int                        `json:"rollouts"`
	Scored       int                        `json:"scored"`
	Resolved     int                        `json:"resolved"`
	MeanTurns    float64                    `json:"mean_turns"`
	Outcomes     map[string]int             `json:"outcomes"`
	ByCategory   map[string]workflows.Group `json:"by_category"`
	ByDifficulty map[string]workflows.Group `json:"by_difficulty"`
	Tasks        []EvalJSONTask             `json:"tasks"`
	Report       store.Ref                  `json:"report"`
}

func evalJSON(rep workflows.EvalReport, ref store.Ref) EvalJSON {
	s := rep.Summary
	out := EvalJSON{
		WorkflowID: rep.WorkflowID, SweepID: rep.SweepID, Agent: rep.Agent.Kind, Attempts: rep.Attempts, S: rep.S,
		ResolvedRate: s.ResolvedRate, MeanReward: s.MeanReward, Rollouts: s.Rollouts, Scored: s.Scored,
		Resolved: s.Resolved, MeanTurns: s.MeanTurns, Outcomes: s.Outcomes,
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
	fmt.Fprintf(w, "\nresolved %d/%d scored (%.1f%%), mean reward %.3f (S = %d), mean turns %.1f, %d rollouts\n",
		s.Resolved, s.Scored, 100*s.ResolvedRate, s.MeanReward, rep.S, s.MeanTurns, s.Rollouts)
	if s.Scored < s.Rollouts {
		fmt.Fprintf(w, "not scored: %v\n", s.Outcomes)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nGROUP\tRESOLVED\tRATE\tMEAN REWARD")
	for _, g := range []struct {
		label string
		m     map[string]workflows.Group
	}{{"category", s.ByCategory}, {"difficulty", s.ByDifficulty}} {
		keys := make([]string, 0, len(g.m))
		for k := range g.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := g.m[k]
			fmt.Fprintf(tw, "%s=%s\t%d/%d\t%.1f%%\t%.3f\n", g.label, k, v.Resolved, v.Scored, 100*v.ResolvedRate, v.MeanReward)
		}
	}
	tw.Flush()
}

func reap(ctx context.Context, args []string, stdout io.Writer) error {
	hostname, _ := os.Hostname()
	fs := flag.NewFlagSet("reap", flag.ContinueOnError)
	host := fs.String("host", hostname, "sandbox host")
	ttl := fs.Duration("ttl", workflows.DefaultReaperTTLSec*time.Second, "remove containers older than this")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	c, err := config.Dial(ctx, slog.LevelError)
	if err != nil {
		return err
	}
	defer c.Close()
	h := ids.Clean(*host)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        fmt.Sprintf("%s-manual-%d", ids.ReaperWorkflowID(h), time.Now().UnixNano()),
		TaskQueue: ids.ControlQueue,
	}, workflows.ReaperWorkflow, workflows.ReaperInput{Host: h, TTLSec: ttl.Seconds()})
	if err != nil {
		return err
	}
	var res activities.ReapResult
	if err := run.Get(ctx, &res); err != nil {
		return err
	}
	for _, r := range res.Removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	fmt.Fprintf(stdout, "reaper on %s: %d removed, %d kept\n", h, len(res.Removed), res.Kept)
	return nil
}
