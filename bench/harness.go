package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// benchHarness: a policy rollout driven by the reference model; the harness's
// per-turn overhead (workflow, activity dispatch, parsing, tokenizing glue,
// episode bookkeeping) as a share of the time spent in inference and in the
// sandbox's terminal.
func benchHarness(ctx context.Context, c client.Client, ref task.Ref, tmp string, turns int) (string, error) {
	inf := &gpu.Supervisor{Name: "inference", Command: gpu.InferenceCommand("", gpu.Slot{}, "--seed", "0"), LogPath: filepath.Join(tmp, "inference.log")}
	if err := inf.Start(ctx); err != nil {
		return "", err
	}
	defer inf.Stop()
	in := workflows.RolloutInput{CampaignID: "bench", Stage: "harness", Task: ref, Attempt: 1, TurnCap: turns,
		Agent: activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 32, Temperature: 1}}
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: ids.ControlQueue}, workflows.RolloutWorkflow, in)
	if err != nil {
		return "", err
	}
	var res workflows.RolloutResult
	if err := wr.Get(ctx, &res); err != nil {
		return "", err
	}
	if res.Turns != turns {
		return "", fmt.Errorf("harness rollout ran %d of %d turns: %s", res.Turns, turns, res.Error)
	}
	first, last, err := turnSpan(ctx, c, wr)
	if err != nil {
		return "", err
	}
	rec, err := readRecord(ctx, res)
	if err != nil {
		return "", err
	}
	var work time.Duration
	for _, t := range rec.Turns {
		work += time.Duration(t.InferenceMs+t.TerminalMs) * time.Millisecond
	}
	wall := last.Sub(first)
	over := wall - work
	var s strings.Builder
	fmt.Fprintf(&s, "\nHarness overhead per model-driven turn (reference model, %d turns, 32 new tokens each): %s per turn of which inference + terminal %s; overhead %s per turn = **%.0f%%** of inference plus exec time.\n",
		turns, ms(wall/time.Duration(turns)), ms(work/time.Duration(turns)), ms(over/time.Duration(turns)), 100*float64(over)/float64(work))
	return s.String(), nil
}
