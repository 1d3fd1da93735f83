// Command starter is the CLI for operators and starters: import and list
// tasks, run eval sweeps, synthesis and audits, steer campaigns, read their
// reports and traces, and run the reaper now. Each command lives in its own
// file; this one dispatches and holds the helpers they share.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/store"
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
  eval --resume SWEEP [-f ERROR_TYPE]... [--wait] [--json]
                                    rerun a finished sweep's unfinished rollouts and those with these
                                    error types (default InfraError, RoutingMissing and an unscored
                                    VerifierError, recorded before verifier failures were scored 0)
  eval export SWEEP --dir DIR [--source NAME] [--check]
                                    write the sweep as Harbor's job directory (result.json per job and
                                    trial, ATIF agent/trajectory.json); --check loads it with harbor
  synth --seeds DIR --rounds R --per-seed N --pool NAME [--rng-seed S] [--synthesizer procedural|llm]
                                    grow seed tasks by recursive synthesis into a pool
  audit (--pool NAME | --tasks DIR) --keep-pool NAME [--eval-tasks DIR] [--config FILE]
                                    audit tasks on eight dimensions; kept tasks go to the keep pool
  campaign start -f FILE [--wait] | status NAME | pause NAME | resume NAME | cancel NAME
           | set-concurrency NAME N | list
                                    run and steer a training campaign (SFT, critic warm-up, PPO, evals)
  report CAMPAIGN (--html FILE | --json | --bars)
                                    plots of reward, EV, log-prob gap, turns and evals per checkpoint
  trace ROLLOUT_ID|TASK_ID          a rollout's turns, assertions, reward, drift and routing reports
  reap [--host H] [--ttl D]         run the reaper for a sandbox host now
  hosts list                        sandbox hosts' reaper schedules, and whether a worker polls each host
  hosts retire NAME [--force]       delete a host's reaper schedule (a host gone for good)
  setup                             register t1flow's search attributes on the cluster (idempotent)

environment: T1FLOW_HOME, T1FLOW_STORE, T1FLOW_UI; Temporal through the SDK's environment
configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*,
or a profile of temporal.toml (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE); see docs/production.md
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
	case args[0] == "hosts":
		err = hostsCmd(ctx, args[1:], stdout)
	case args[0] == "setup":
		err = setup(ctx, args[1:], stdout)
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

// parseOne is parse for commands that take exactly one argument.
func parseOne(fs *flag.FlagSet, args []string, usage string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", badInput(errors.New(usage))
	}
	return pos[0], nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func openStore(dir string) (store.Store, error) { return config.OpenStore(dir) }

// dial connects to Temporal (config.LoadTemporal: temporal.toml, TEMPORAL_*), quietly:
// the CLI's output is for the user, not the SDK's log.
func dial(ctx context.Context) (client.Client, error) { return config.Dial(ctx, slog.LevelError) }

// infoOut is where progress lines go: stderr when stdout carries one JSON document.
func infoOut(asJSON bool, stdout, stderr io.Writer) io.Writer {
	if asJSON {
		return stderr
	}
	return stdout
}

// kv prints counts by key, in key order.
func kv(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedStrings(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedStrings[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
