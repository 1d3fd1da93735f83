package gpu

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
)

// The trainer computes log-probs at each trajectory's temperature; a batch
// sampled at 0.7 but described without it would be trained as if sampled at 1.0.
func TestBatchMetaCarriesTemperature(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := st.Put(context.Background(), "t.safetensors", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st, WorkDir: t.TempDir()}
	dir, err := a.materialize(context.Background(), TrainInput{Key: "k", Trajectories: []TrajectoryRef{
		{Trajectory: ref, Reward: 1, Temperature: 0.7}, {Trajectory: ref}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Trajectories []map[string]any `json:"trajectories"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if got := meta.Trajectories[0]["temperature"]; got != 0.7 {
		t.Errorf("temperature 0.7 written as %v: %s", got, b)
	}
	if _, ok := meta.Trajectories[1]["temperature"]; ok {
		t.Errorf("an unrecorded temperature must be left to the trainer's default, not written as 0: %s", b)
	}
}
