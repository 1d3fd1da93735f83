package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// memStore keeps what the StoreJSON mocks store, so the sweep's activities
// (faked here: workflows/sweepstore imports this package) read it back.
var memStore sync.Map // key -> []byte

func storeOK(_ context.Context, in activities.StoreJSONInput) (store.Ref, error) {
	b, err := json.Marshal(in.Value)
	if err != nil {
		return store.Ref{}, err
	}
	memStore.Store(in.Key, b)
	return store.Ref{URI: "file:///store/" + in.Key, SHA256: "ab", Bytes: 2}, nil
}

func memGet(key string, v any) error {
	b, ok := memStore.Load(key)
	if !ok {
		return fmt.Errorf("%s: not stored", key)
	}
	return json.Unmarshal(b.([]byte), v)
}

// registerSweepFakes registers in-memory SweepTaskPage and BuildEvalReport.
func registerSweepFakes(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(func(_ context.Context, in TaskPageInput) (TaskPage, error) {
		var p task.Pool
		if err := memGet(in.Manifest.URI[len("file:///store/"):], &p); err != nil {
			return TaskPage{}, err
		}
		end := min(in.Offset+in.Limit, len(p.Tasks))
		return TaskPage{Offset: in.Offset, Tasks: p.Tasks[in.Offset:end], Total: len(p.Tasks)}, nil
	}, activity.RegisterOptions{Name: ActivitySweepTaskPage})
	env.RegisterActivityWithOptions(func(_ context.Context, in EvalReportInput) (EvalSweepResult, error) {
		var rs []RolloutResult
		for n := 0; n < in.Chunks; n++ {
			var chunk []RolloutResult
			if err := memGet(ResultChunkKey(in.SweepID, n), &chunk); err != nil {
				return EvalSweepResult{}, err
			}
			rs = append(rs, chunk...)
		}
		if len(rs) != in.Expected {
			return EvalSweepResult{}, fmt.Errorf("%d results, expected %d", len(rs), in.Expected)
		}
		return EvalSweepResult{SweepID: in.SweepID, Summary: Summarize(rs), Report: store.Ref{URI: "file:///store/" + EvalReportKey(in.SweepID)}}, nil
	}, activity.RegisterOptions{Name: ActivityBuildEvalReport})
	env.RegisterActivityWithOptions(func(ctx context.Context, in RolloutRecordInput) (store.Ref, error) {
		return storeOK(ctx, activities.StoreJSONInput{Key: in.Key, Value: in.Record}) // turns are not faked
	}, activity.RegisterOptions{Name: ActivityBuildRolloutRecord})
	env.RegisterActivityWithOptions(func(context.Context, []string) ([]ClosedRollout, error) {
		return nil, nil // the fakes' rollouts always report
	}, activity.RegisterOptions{Name: ActivityClosedRollouts})
	mockClosed.reset()
	env.RegisterActivityWithOptions(func(_ context.Context, in RolloutResultsInput) ([]ClosedResult, error) {
		return mockClosed.closed(in.WorkflowIDs), nil // answers at once: the workflow pauses between empty answers
	}, activity.RegisterOptions{Name: ActivityRolloutResults})
}

// mockClosed holds the results of the mocked rollouts that completed
// (mockedRollout), for the fake RolloutResults.
var mockClosed closedRollouts

type closedRollouts struct {
	mu sync.Mutex
	rs map[string]RolloutResult
}

func (c *closedRollouts) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rs = map[string]RolloutResult{}
}

func (c *closedRollouts) put(r RolloutResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rs != nil {
		c.rs[r.WorkflowID] = r
	}
}

func (c *closedRollouts) closed(wids []string) []ClosedResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ClosedResult
	for _, wid := range wids {
		if r, ok := c.rs[wid]; ok {
			out = append(out, ClosedResult{WorkflowID: wid, Status: "COMPLETED", Result: &r})
		}
	}
	return out
}
