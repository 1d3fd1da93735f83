package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/trajectory"
)

// benchTrajectory: write+read of a 32k-position trajectory with 48 layers ×
// top-8 routing through the artifact store, against a raw copy of its bytes.
func benchTrajectory(tmp string) (string, error) {
	const positions, layers, topk, experts = 32768, 48, 8, 256
	rng := rand.New(rand.NewSource(1))
	rec := trajectory.Record{Layers: layers, TopK: topk, Experts: experts,
		Tokens: make([]int32, positions), LossMask: make([]uint8, positions), Logprobs: make([]float32, positions),
		Routing: make([]int32, (positions-1)*layers*topk)} // T−1 rows
	for i := range rec.Tokens {
		rec.Tokens[i] = int32(rng.Intn(150000))
		if i%3 != 0 {
			rec.LossMask[i], rec.Logprobs[i] = 1, -rng.Float32()
		}
	}
	for i := range rec.Routing {
		rec.Routing[i] = int32(rng.Intn(experts))
	}
	st, err := store.NewLocal(filepath.Join(tmp, "traj-store"))
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	var ours, raw []time.Duration
	var size int
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		b, err := rec.Encode()
		if err != nil {
			return "", err
		}
		ref, err := st.Put(ctx, fmt.Sprintf("t/%d.safetensors", i), bytes.NewReader(b))
		if err != nil {
			return "", err
		}
		got, err := st.Get(ctx, ref)
		if err != nil {
			return "", err
		}
		if _, _, err := safetensors.Read(got); err != nil {
			return "", err
		}
		t1 := time.Now()
		size = len(b)
		// Baseline: the same bytes written (with fsync) and read back as a plain file.
		p := filepath.Join(tmp, fmt.Sprintf("raw-%d", i))
		f, err := os.Create(p)
		if err != nil {
			return "", err
		}
		f.Write(b)
		f.Sync()
		f.Close()
		if _, err := os.ReadFile(p); err != nil {
			return "", err
		}
		t2 := time.Now()
		ours, raw = append(ours, t1.Sub(t0)), append(raw, t2.Sub(t1))
	}
	o, r := median(ours), median(raw)
	mb := float64(size) / (1 << 20)
	var s strings.Builder
	fmt.Fprintf(&s, "| trajectory write + read, %d positions × %d layers × top-%d (U8 routing, %.1f MiB): encode, store (atomic, fsync, sha256), read (sha256 check), decode vs raw write+fsync+read of the same bytes | %s (%.0f MiB/s) | %s (%.0f MiB/s) | %.2f× | — |\n",
		positions, layers, topk, mb, ms(o), mb/o.Seconds(), ms(r), mb/r.Seconds(), float64(o)/float64(r))
	return s.String(), nil
}
