package tfevents

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

type event struct {
	wall    float64
	step    int64
	version string
	scalars map[string]float32
}

// read decodes a file the way TensorBoard's reader does: every record's two
// masked CRCs checked, each Event's fields by number.
func read(t *testing.T, b []byte) []event {
	t.Helper()
	var out []event
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("truncated record header: %d bytes", len(b))
		}
		n := binary.LittleEndian.Uint64(b[:8])
		if got := binary.LittleEndian.Uint32(b[8:12]); got != maskedCRC(b[:8]) {
			t.Fatalf("length CRC %x, want %x", got, maskedCRC(b[:8]))
		}
		data := b[12 : 12+n]
		if got := binary.LittleEndian.Uint32(b[12+n : 16+n]); got != maskedCRC(data) {
			t.Fatalf("data CRC %x, want %x", got, maskedCRC(data))
		}
		b = b[16+n:]
		out = append(out, decodeEvent(t, data))
	}
	return out
}

func fields(t *testing.T, b []byte, f func(num protowire.Number, typ protowire.Type, b []byte) int) {
	t.Helper()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal("bad tag")
		}
		b = b[n:]
		m := f(num, typ, b)
		if m < 0 {
			t.Fatalf("field %d: bad value", num)
		}
		b = b[m:]
	}
}

func decodeEvent(t *testing.T, b []byte) event {
	e := event{scalars: map[string]float32{}}
	fields(t, b, func(num protowire.Number, typ protowire.Type, b []byte) int {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			e.wall = math.Float64frombits(v)
			return n
		case num == eventStep && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			e.step = int64(v)
			return n
		case num == eventFileVersion && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			e.version = v
			return n
		case num == eventSummary && typ == protowire.BytesType:
			sum, n := protowire.ConsumeBytes(b)
			fields(t, sum, func(num protowire.Number, typ protowire.Type, b []byte) int {
				val, n := protowire.ConsumeBytes(b)
				var tag string
				var x float32
				fields(t, val, func(num protowire.Number, typ protowire.Type, b []byte) int {
					if num == valueTag {
						s, n := protowire.ConsumeString(b)
						tag = s
						return n
					}
					v, n := protowire.ConsumeFixed32(b)
					x = math.Float32frombits(v)
					return n
				})
				e.scalars[tag] = x
				return n
			})
			return n
		}
		t.Fatalf("unexpected field %d type %d", num, typ)
		return -1
	})
	return e
}

func TestCRC32CIsCastagnoli(t *testing.T) {
	// The CRC-32C check value (RFC 3720): a table other than Castagnoli's
	// would write files TensorBoard rejects as corrupt.
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c(123456789) = %x, want e3069283", got)
	}
}

func TestFileHoldsTheVersionThenTheScalarsAtTheirStep(t *testing.T) {
	b := File(1700000000.5, map[int64]map[string]float64{
		3: {"ppo/explained_variance": 0.75, "rollout/resolved_rate": 0.5, "ppo/nan": math.NaN()},
		0: {"critic/warmup_ev": 0.25},
	})
	evs := read(t, b)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (file version, step 0, step 3)", len(evs))
	}
	if evs[1].step != 0 || evs[1].scalars["critic/warmup_ev"] != 0.25 {
		t.Fatalf("second event %+v: want step 0's scalars first", evs[1])
	}
	evs = append(evs[:1], evs[2])
	if evs[0].version != FileVersion || evs[0].wall != 1700000000.5 {
		t.Fatalf("first event %+v: want the file version at the wall time", evs[0])
	}
	s := evs[1]
	if s.step != 3 || s.wall != 1700000000.5 {
		t.Fatalf("scalar event at step %d wall %v, want 3 and 1700000000.5", s.step, s.wall)
	}
	want := map[string]float32{"ppo/explained_variance": 0.75, "rollout/resolved_rate": 0.5}
	if len(s.scalars) != len(want) {
		t.Fatalf("scalars %v, want %v (NaN left out)", s.scalars, want)
	}
	for k, v := range want {
		if s.scalars[k] != v {
			t.Fatalf("scalar %s = %v, want %v", k, s.scalars[k], v)
		}
	}
}

func TestFileNameIsOneTensorBoardReads(t *testing.T) {
	if got := FileName(1700000000.9, "step-000003"); got != "events.out.tfevents.1700000000.step-000003" {
		t.Fatalf("FileName = %q", got)
	}
}
