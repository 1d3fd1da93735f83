package gpu

import (
	"context"
	"encoding/json"
	"fmt"
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

// A batch too big for one payload comes as chunks in the store: the trainer's
// batch is the chunks' trajectories in order, then the inline ones. A chunk
// that was changed after it was written, or is not a list of trajectory
// refs, is refused by name, never trained on.
func TestBatchReadsChunksInOrderAndRefusesABadOne(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	traj := func(name string) TrajectoryRef {
		ref, err := st.Put(ctx, name+".safetensors", strings.NewReader(name))
		if err != nil {
			t.Fatal(err)
		}
		return TrajectoryRef{Trajectory: ref, TaskID: name}
	}
	chunk := func(key string, v any) store.Ref {
		ref, err := store.PutJSON(ctx, st, key, v)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	c0 := chunk("c0.json", []TrajectoryRef{traj("a"), traj("b")})
	c1 := chunk("c1.json", []TrajectoryRef{traj("c")})
	a := &Activities{Store: st, WorkDir: t.TempDir()}
	dir, err := a.materialize(ctx, TrainInput{Key: "k", Chunks: []store.Ref{c0, c1}, Trajectories: []TrajectoryRef{traj("d")}})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for i := 0; i < 5; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "traj-0000"+string(rune('0'+i))+".safetensors"))
		if err != nil {
			break
		}
		order = append(order, string(b))
	}
	if strings.Join(order, "") != "abcd" {
		t.Fatalf("batch files hold %v, want a b c d (chunks in order, then inline)", order)
	}
	// Overwritten after its ref was taken: the checksum no longer matches.
	if _, err := st.Put(ctx, "c1.json", strings.NewReader(`[]`)); err != nil {
		t.Fatal(err)
	}
	_, err = a.materialize(ctx, TrainInput{Key: "k", Chunks: []store.Ref{c0, c1}})
	if err == nil || !strings.Contains(err.Error(), "chunks[1]") {
		t.Fatalf("a changed chunk: %v, want an error naming chunks[1]", err)
	}
	bad := chunk("bad.json", map[string]int{"not": 1})
	if _, err = a.materialize(ctx, TrainInput{Key: "k", Chunks: []store.Ref{bad}}); err == nil || !strings.Contains(err.Error(), "chunks[0]") {
		t.Fatalf("a chunk that is no list: %v, want an error naming chunks[0]", err)
	}
	if _, err := a.train(ctx, "ppo_step", TrainInput{Key: "k"}); err == nil {
		t.Fatal("a batch of no trajectories and no chunks was accepted")
	}
	// Seen (a warm-up's earlier rounds) comes first, marked; a bad seen
	// chunk is named as such; only critic_fit takes seen trajectories.
	dir, err = a.materialize(ctx, TrainInput{Key: "k", SeenChunks: []store.Ref{c0}, Seen: []TrajectoryRef{traj("e")}, Trajectories: []TrajectoryRef{traj("d")}})
	if err != nil {
		t.Fatal(err)
	}
	var meta batchMeta
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err != nil || json.Unmarshal(b, &meta) != nil {
		t.Fatalf("meta.json: %v", err)
	}
	var got []string
	for _, e := range meta.Trajectories {
		b, _ := os.ReadFile(filepath.Join(dir, e.File))
		got = append(got, fmt.Sprintf("%s:%v", b, e.Seen))
	}
	if strings.Join(got, " ") != "a:true b:true e:true d:false" {
		t.Fatalf("batch with seen trajectories holds %v, want the seen ones first and marked", got)
	}
	if _, err = a.materialize(ctx, TrainInput{Key: "k", SeenChunks: []store.Ref{bad}, Trajectories: []TrajectoryRef{traj("d")}}); err == nil || !strings.Contains(err.Error(), "seen_chunks[0]") {
		t.Fatalf("a bad seen chunk: %v, want an error naming seen_chunks[0]", err)
	}
	if _, err := a.train(ctx, "ppo_step", TrainInput{Key: "k", Seen: []TrajectoryRef{traj("e")}, Trajectories: []TrajectoryRef{traj("d")}}); err == nil || !strings.Contains(err.Error(), "critic_fit only") {
		t.Fatalf("ppo_step with seen trajectories: %v, want refused", err)
	}
}
