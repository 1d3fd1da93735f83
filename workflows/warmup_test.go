package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// warmupEnv runs the warm-up with rollouts that all succeed and a trainer
// whose critic_fit answers fits[round-1] (nil values: undefined EV).
func warmupEnv(t *testing.T, in WarmupInput, fits ...gpu.Metrics) (*testsuite.TestWorkflowEnvironment, *int) {
	fitted := 0
	env := warmupEnvWith(func(gpu.TrainInput) gpu.Metrics {
		fitted++
		return fits[min(fitted, len(fits))-1]
	})
	return env, &fitted
}

// warmupEnvWith: rollouts that all succeed, and critic_fit answered by fit.
func warmupEnvWith(fit func(gpu.TrainInput) gpu.Metrics) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&gpu.Activities{})
	Register(env)
	traj := store.Ref{URI: "file:///t", SHA256: "ab", Bytes: 1}
	env.OnWorkflow(RolloutWorkflow, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, rin RolloutInput) (RolloutResult, error) {
		return mockedRollout(ctx, rin, RolloutResult{Outcome: OutcomeResolved, Scored: true, Reward: 0.5, Trajectory: &traj, PolicyVersions: []string{"v0"}})
	})
	env.OnActivity(gact.TrainerCriticFit, mock.Anything, mock.Anything).Return(func(_ context.Context, ti gpu.TrainInput) (gpu.Metrics, error) {
		return fit(ti), nil
	})
	return env
}

func warmupIn() WarmupInput {
	return WarmupInput{RolloutBatch: RolloutBatch{Campaign: "c", Tasks: []task.Ref{testTask, testTask}, Version: "v0", Concurrency: 2, TurnCap: 1, S: 20,
		Agent: activities.AgentSpec{Kind: activities.AgentPolicy, Temperature: 1}}, Epochs: 1, FitEpochs: 1, Gate: 0.7, MaxRounds: 3}
}

func ev(before, fitted any) gpu.Metrics {
	return gpu.Metrics{"explained_variance_before": before, "explained_variance": fitted, "held_out": 2.0}
}

func runWarmup(t *testing.T, env *testsuite.TestWorkflowEnvironment, in WarmupInput) (WarmupResult, error) {
	t.Helper()
	env.ExecuteWorkflow(CriticWarmupWorkflow, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("warm-up did not complete")
	}
	var res WarmupResult
	err := env.GetWorkflowError()
	if err == nil {
		env.GetWorkflowResult(&res)
	}
	return res, err
}

// A critic that memorises each batch (in-sample EV 0.99) but explains
// nothing on fresh rollouts (held-out EV -1.03) must not open PPO: the
// issue's pure-noise case, which the in-sample gate passed.
func TestWarmupGatesOnHeldOutEV(t *testing.T) {
	env, fitted := warmupEnv(t, warmupIn(), ev(-3.12, 0.993), ev(-1.03, 0.99), ev(-0.9, 0.99))
	_, err := runWarmup(t, env, warmupIn())
	if err == nil || errorType(err) != errs.WarmupGate || !strings.Contains(err.Error(), "held-out explained variance -0.900 below the gate 0.700") {
		t.Fatalf("want the gate to fail on held-out EV, got %v", err)
	}
	var carried WarmupResult // what a campaign records if its operator skips the stage
	if !gateMissed(err, &carried) || carried.WarmEV == nil || *carried.WarmEV != -0.9 || carried.ColdEV == nil || *carried.ColdEV != -3.12 || !strings.HasPrefix(carried.Gate, "missed") {
		t.Fatalf("the gate's error carries %+v (warm %s), want warm -0.900, cold -3.120 and the miss", carried, fmtEVp(carried.WarmEV))
	}
	if *fitted != 3 {
		t.Fatalf("%d rounds, want max_rounds 3", *fitted)
	}
}

// The paper's shape: cold -33.6, warm (held out) 0.8 in round 2.
func TestWarmupPassesOnHeldOutEVAndRecordsColdAndWarm(t *testing.T) {
	env, fitted := warmupEnv(t, warmupIn(), ev(-33.6, 0.5), ev(0.8, 0.9))
	res, err := runWarmup(t, env, warmupIn())
	if err != nil || *fitted != 2 || res.ColdEV == nil || *res.ColdEV != -33.6 || res.WarmEV == nil || *res.WarmEV != 0.8 || !strings.HasPrefix(res.Gate, "passed") {
		t.Fatalf("res %+v, %d fits, err %v", res, *fitted, err)
	}
}

// Round 1's EV is the cold critic's: even a lucky value there must not pass,
// since the critic had not been fitted yet.
func TestWarmupNeverPassesOnTheColdRound(t *testing.T) {
	env, fitted := warmupEnv(t, warmupIn(), ev(0.9, 0.95), ev(0.8, 0.9))
	res, err := runWarmup(t, env, warmupIn())
	if err != nil || *fitted != 2 || res.Rounds != 2 {
		t.Fatalf("res %+v, %d fits, err %v", res, *fitted, err)
	}
}

// Returns without variance leave EV undefined: that is reported as such and
// never passes the gate; only an explicit advisory gate lets PPO start.
func TestWarmupUndefinedEVNeverPassesSilently(t *testing.T) {
	env, _ := warmupEnv(t, warmupIn(), ev(nil, nil))
	_, err := runWarmup(t, env, warmupIn())
	if err == nil || errorType(err) != errs.WarmupGate || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("undefined EV: %v", err)
	}
	in := warmupIn()
	in.Advisory = true
	env, _ = warmupEnv(t, in, ev(nil, nil))
	res, err := runWarmup(t, env, in)
	if err != nil || res.WarmEV != nil || !strings.Contains(res.Gate, "advisory") || !strings.Contains(res.Gate, "undefined") {
		t.Fatalf("advisory gate: %+v %v", res, err)
	}
}

// Each round fits the critic on every round's rollouts so far, the earlier
// ones as Seen (held out from explained_variance_before: the new round is);
// a run continued as new carries them in its Resume.
func TestWarmupFitsEachRoundOnTheRoundsBefore(t *testing.T) {
	for _, resume := range []bool{false, true} {
		var fits []gpu.TrainInput
		env := warmupEnvWith(func(ti gpu.TrainInput) gpu.Metrics {
			fits = append(fits, ti)
			return ev(0.1, 0.9)
		})
		in := warmupIn()
		in.Advisory = true
		want := []int{0, 2, 4}
		if resume {
			old := gpu.TrajectoryRef{Trajectory: store.Ref{URI: "file:///old", SHA256: "cd", Bytes: 1}}
			chunk := store.Ref{URI: "file:///chunk", SHA256: "ef", Bytes: 1}
			in.Resume = &WarmupResume{Round: 2, Seen: []gpu.TrajectoryRef{old, old}, SeenChunks: []store.Ref{chunk}}
			want = []int{2, 4}
		}
		res, err := runWarmup(t, env, in)
		if err != nil || res.Rounds != 3 || len(fits) != len(want) {
			t.Fatalf("resume %v: res %+v, %d fits, err %v", resume, res, len(fits), err)
		}
		for i, f := range fits {
			if len(f.Trajectories) != 2 || len(f.Seen) != want[i] {
				t.Fatalf("resume %v: fit %d has %d new and %d seen trajectories, want 2 and %d", resume, i+1, len(f.Trajectories), len(f.Seen), want[i])
			}
			if resume && (len(f.SeenChunks) != 1 || f.Seen[0].Trajectory.URI != "file:///old") {
				t.Fatalf("fit %d lost the resumed run's seen rollouts: %+v %+v", i+1, f.Seen, f.SeenChunks)
			}
		}
	}
}

// A trainer that does not report held_out ignored the seen trajectories, so
// its "held-out" EV is partly in sample: the warm-up must stop, never gate
// on it. Past FlushEvery inline refs, the seen rollouts go to the store as
// one chunk instead of riding in every later input.
func TestWarmupRefusesATrainerThatIgnoresSeenAndSpillsSeenToTheStore(t *testing.T) {
	env := warmupEnvWith(func(gpu.TrainInput) gpu.Metrics {
		return gpu.Metrics{"explained_variance_before": 0.99, "explained_variance": 0.99}
	})
	_, err := runWarmup(t, env, warmupIn())
	if err == nil || errorType(err) != errs.BadInput || !strings.Contains(err.Error(), "held_out") {
		t.Fatalf("a trainer without held_out: %v, want BadInput naming held_out", err)
	}
	defer func(n int) { FlushEvery = n }(FlushEvery)
	FlushEvery = 3
	var fits []gpu.TrainInput
	env = warmupEnvWith(func(ti gpu.TrainInput) gpu.Metrics {
		fits = append(fits, ti)
		return ev(0.1, 0.9)
	})
	stored := 0
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.StoreJSONInput) (store.Ref, error) {
		stored++
		var refs []gpu.TrajectoryRef
		b, _ := json.Marshal(in.Value)
		if err := json.Unmarshal(b, &refs); err != nil || len(refs) != 4 || !strings.Contains(in.Key, "warmup-seen") {
			t.Errorf("stored %s under %s (%v), want rounds 1-2's 4 refs under a warmup-seen key", b, in.Key, err)
		}
		return store.Ref{URI: "file:///" + in.Key, SHA256: "ab", Bytes: 1}, nil
	})
	in := warmupIn()
	in.Advisory = true
	if _, err := runWarmup(t, env, in); err != nil || len(fits) != 3 || stored != 1 {
		t.Fatalf("err %v, %d fits, %d stored chunks", err, len(fits), stored)
	}
	if f := fits[2]; len(f.Seen) != 0 || len(f.SeenChunks) != 1 {
		t.Fatalf("round 3's fit: %d inline seen, %d seen chunks; want rounds 1-2's 4 in one chunk", len(f.Seen), len(f.SeenChunks))
	}
}

// A warm-up fit sends the campaign's ppo.critic_lr when set (the critic PPO
// then trains), and only its epochs when not (the preset's rate).
func TestWarmupFitSendsTheCampaignsCriticRate(t *testing.T) {
	if h := fitHyper(WarmupInput{FitEpochs: 5}); len(h) != 1 || h["epochs"] != 5 {
		t.Fatalf("unset: %v", h)
	}
	if h := fitHyper(WarmupInput{FitEpochs: 5, CriticLR: 1e-4}); len(h) != 2 || h["critic_lr"] != 1e-4 || h["epochs"] != 5 {
		t.Fatalf("set: %v", h)
	}
}

// The trainer's answer-prefix ceiling rides beside each round's EV: in the
// result (the warm round's), in the history, and in the gate's miss, so an
// operator reads a miss as the critic's or the data's.
func TestWarmupRecordsTheCeilingBesideEachRound(t *testing.T) {
	withCeiling := func(before, top float64) gpu.Metrics {
		m := ev(before, 0.9)
		m["ceiling_ev_before"] = top
		return m
	}
	cold := ev(-2.0, 0.9) // round 1 without a ceiling: only the rounds that report one show one
	env, _ := warmupEnv(t, warmupIn(), cold, withCeiling(0.61, 0.74), withCeiling(0.66, 0.52))
	_, err := runWarmup(t, env, warmupIn())
	var res WarmupResult
	if !gateMissed(err, &res) {
		t.Fatalf("want a gate miss, got %v", err)
	}
	if res.WarmCeiling == nil || *res.WarmCeiling != 0.52 || res.History[0].Ceiling != nil || res.History[1].Ceiling == nil || *res.History[1].Ceiling != 0.74 {
		t.Fatalf("ceilings: warm %s, history %+v", fmtEVp(res.WarmCeiling), res.History)
	}
	for _, want := range []string{"round 1 -2.000, round 2 0.610 (ceiling 0.740), round 3 0.660 (ceiling 0.520)", "the data's"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the miss does not say %q: %v", want, err)
		}
	}
	env, _ = warmupEnv(t, warmupIn(), cold, ev(-1, 0.9), ev(-0.5, 0.9)) // a trainer from before the ceiling
	if _, err = runWarmup(t, env, warmupIn()); err == nil || strings.Contains(err.Error(), "ceiling") {
		t.Fatalf("a miss without ceilings mentions one: %v", err)
	}
}
