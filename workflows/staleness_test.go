package workflows

import (
	"fmt"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// ppo.max_staleness K: a rollout trains when all its segments were sampled
// within K versions of the batch's, counted by how far behind; older,
// newer or unparseable versions are stale; K = 0 is the exact match it was.
func TestStalenessBoundAtBatchAssembly(t *testing.T) {
	traj := store.Ref{URI: "t"}
	for _, tc := range []struct {
		k        int
		versions []string
		stale    bool
		behind   int
	}{
		{0, []string{"v5"}, false, 0},
		{0, []string{"v4"}, true, 0},
		{0, []string{"v4", "v5"}, true, 0},
		{1, []string{"v5"}, false, 0},
		{1, []string{"v4"}, false, 1},
		{1, []string{"v4", "v5"}, false, 1}, // a rollout that spans an update
		{1, []string{"v3", "v5"}, true, 0},
		{1, []string{"v3"}, true, 0},
		{2, []string{"v3"}, false, 2},
		{1, []string{"v6"}, true, 0}, // newer than the policy being trained: not ours
		{1, []string{"default"}, true, 0},
		{1, nil, true, 0},
	} {
		var c collected
		c.add(RolloutResult{Scored: true, Outcome: OutcomeResolved, Trajectory: &traj, PolicyVersions: tc.versions},
			RolloutBatch{Version: "v5", MaxStaleness: tc.k, Agent: activities.AgentSpec{Temperature: 1}})
		name := fmt.Sprintf("K=%d %v", tc.k, tc.versions)
		if tc.stale {
			if c.Stale != 1 || c.Trained != 0 || len(c.batch) != 0 {
				t.Errorf("%s: want left out as stale, got stale %d trained %d", name, c.Stale, c.Trained)
			}
			continue
		}
		if c.Stale != 0 || c.Trained != 1 || len(c.batch) != 1 {
			t.Errorf("%s: want trained, got stale %d trained %d", name, c.Stale, c.Trained)
			continue
		}
		if tc.k == 0 && c.Staleness != nil {
			t.Errorf("%s: K=0 records no staleness histogram, got %v", name, c.Staleness)
		}
		if tc.k > 0 && (len(c.Staleness) != tc.behind+1 || c.Staleness[tc.behind] != 1) {
			t.Errorf("%s: staleness %v, want one rollout %d behind", name, c.Staleness, tc.behind)
		}
	}
}

// A PPO step at max_staleness 1 on policy v2 trains the rollouts sampled by
// v2 and v1 and leaves the v0 one out, counted as stale and in the record's
// staleness histogram; at K = 0 both older ones are left out.
func TestPPOStepLeavesOutRolloutsOlderThanMaxStaleness(t *testing.T) {
	tasks := []task.Ref{}
	for i := 0; i < 4; i++ {
		tasks = append(tasks, task.Ref{ID: fmt.Sprintf("%016x", i+1), Name: fmt.Sprintf("t%d", i), Bundle: testTask.Bundle})
	}
	byTask := map[string][]string{tasks[0].ID: {"v2"}, tasks[1].ID: {"v1"}, tasks[2].ID: {"v0"}, tasks[3].ID: {"v1", "v2"}}
	for _, k := range []int{1, 0} {
		r := newStepRig(t, func(RolloutInput) bool { return false })
		r.versions = func(rin RolloutInput) []string { return byTask[rin.Task.ID] }
		in := stepIn(tasks...)
		in.Version, in.MaxStaleness, in.MaxFailedShare = "v2", k, 0.75
		rec, err := r.run(t, in)
		if err != nil {
			t.Fatalf("K=%d: %v", k, err)
		}
		want := map[int][3]int{1: {3, 1, 3}, 0: {1, 3, 1}}[k] // trained, stale, the trainer's batch
		if rec.Trained != want[0] || rec.Stale != want[1] || r.trained != want[2] || rec.Rollouts != 4 {
			t.Fatalf("K=%d: trained %d stale %d of %d, trainer got %d; want %v", k, rec.Trained, rec.Stale, rec.Rollouts, r.trained, want)
		}
		if k == 1 && (fmt.Sprint(rec.Staleness) != "[1 2]" || rec.MaxStaleness != 1) {
			t.Fatalf("staleness histogram %v (max_staleness %d), want [1 2]: one on v2, two a version behind", rec.Staleness, rec.MaxStaleness)
		}
		for _, b := range r.batch {
			if b.PolicyVersion == "v0" {
				t.Fatalf("K=%d: the v0 rollout reached the trainer", k)
			}
		}
		sc := StepScalars(rec)
		if k == 1 && (sc["rollout/staleness_max"] != 1 || sc["rollout/staleness_mean"] != 2.0/3 || sc["rollout/stale"] != 1) {
			t.Fatalf("scalars %v", sc)
		}
	}
}
