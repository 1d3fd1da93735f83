package trajectory

import (
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/safetensors"
)

func TestEncodeRoundTripAndRoutingType(t *testing.T) {
	r := Record{
		Tokens: []int32{257, 10, 11, 12}, LossMask: []uint8{0, 0, 1, 1}, Logprobs: []float32{0, 0, -0.5, -1.25},
		Routing: []int32{0, 1, 2, 3, 4, 5}, Layers: 1, TopK: 2, Experts: 8, Meta: map[string]string{"task": "x"},
	}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ts, meta, err := safetensors.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	if meta["task"] != "x" {
		t.Fatalf("metadata %v", meta)
	}
	tok, _ := ts["tokens"].AsInt32()
	if len(tok) != 4 || tok[0] != 257 {
		t.Fatalf("tokens %v", tok)
	}
	re := ts["routed_experts"]
	if re.DType != "U8" || len(re.Shape) != 3 || re.Shape[0] != 3 || re.Shape[2] != 2 {
		t.Fatalf("routing %s %v: want U8 [3,1,2] (T−1 rows)", re.DType, re.Shape)
	}
	r.Experts = 300
	b, _ = r.Encode()
	ts, _, _ = safetensors.Read(b)
	if ts["routed_experts"].DType != "U16" {
		t.Fatalf("300 experts need U16, got %s", ts["routed_experts"].DType)
	}
	if _, _, err := safetensors.Read(b[:len(b)-3]); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a truncated file must be rejected: %v", err)
	}
}

func TestEncodeRejectsBadRecords(t *testing.T) {
	bad := []Record{
		{Tokens: []int32{1, 2}, LossMask: []uint8{0}, Logprobs: []float32{0, 0}},
		{Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Logprobs: []float32{0, 0}, Routing: []int32{9, 0}, Layers: 1, TopK: 2, Experts: 8},
		{Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Logprobs: []float32{0, 0}, Routing: []int32{1, 0, 2}, Layers: 1, TopK: 2, Experts: 8},
		// A row per token (the layout before T−1): one row too many.
		{Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Logprobs: []float32{0, 0}, Routing: []int32{1, 0, 2, 3}, Layers: 1, TopK: 2, Experts: 8},
		// One row too few.
		{Tokens: []int32{1, 2, 3}, LossMask: []uint8{0, 1, 1}, Logprobs: []float32{0, 0, 0}, Routing: []int32{1, 0}, Layers: 1, TopK: 2, Experts: 8},
	}
	for i, r := range bad {
		if _, err := r.Encode(); err == nil {
			t.Errorf("record %d: want an error", i)
		}
	}
}
