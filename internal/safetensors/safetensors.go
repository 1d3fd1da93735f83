// Package safetensors reads and writes the safetensors format: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian bytes.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

// Tensor is one named array; Data holds its raw little-endian bytes.
type Tensor struct {
	DType string // F32, I32, U8, U16, I64
	Shape []int
	Data  []byte
}

var itemSize = map[string]int{"F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "U16": 2, "U8": 1, "BOOL": 1}

// Entry is one tensor's header entry: its dtype, shape and byte range in
// the data that follows the header.
type Entry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// check says what is wrong with entry name's dtype or byte range in data of
// dataLen bytes.
func (e Entry) check(name string, dataLen int64) error {
	size, ok := itemSize[e.DType]
	if !ok {
		return fmt.Errorf("safetensors: tensor %s: dtype %q is not supported", name, e.DType)
	}
	s, end := e.DataOffsets[0], e.DataOffsets[1]
	if s < 0 || end < s || end > dataLen || int(end-s) != elements(e.Shape)*size {
		return fmt.Errorf("safetensors: tensor %s: byte range %d..%d does not fit shape %v in %d data bytes (truncated?)", name, s, end, e.Shape, dataLen)
	}
	return nil
}

// parseHeader decodes a header's JSON: the tensor entries and the metadata.
func parseHeader(b []byte) (map[string]Entry, map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: header: %w", err)
	}
	out := map[string]Entry{}
	var meta map[string]string
	for name, r := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(r, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors: __metadata__: %w", err)
			}
			continue
		}
		var e Entry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors: tensor %s: %w", name, err)
		}
		out[name] = e
	}
	return out, meta, nil
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Write encodes tensors (sorted by name) and optional string metadata.
func Write(w io.Writer, tensors map[string]Tensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	var off int64
	for _, n := range names {
		t := tensors[n]
		size, ok := itemSize[t.DType]
		if !ok {
			return fmt.Errorf("tensor %s: dtype %q is not supported", n, t.DType)
		}
		if want := elements(t.Shape) * size; want != len(t.Data) {
			return fmt.Errorf("tensor %s: shape %v needs %d bytes, has %d", n, t.Shape, want, len(t.Data))
		}
		header[n] = Entry{DType: t.DType, Shape: t.Shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	if pad := len(h) % 8; pad != 0 {
		h = append(h, bytes.Repeat([]byte(" "), 8-pad)...)
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(h))); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, n := range names {
		if _, err := w.Write(tensors[n].Data); err != nil {
			return err
		}
	}
	return nil
}

// Read decodes a whole file's bytes. Errors say what is wrong with them.
func Read(b []byte) (map[string]Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("safetensors: %d bytes is too short", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("safetensors: header of %d bytes runs past the end (%d bytes)", n, len(b))
	}
	entries, meta, err := parseHeader(b[8 : 8+n])
	if err != nil {
		return nil, nil, err
	}
	data := b[8+n:]
	out := map[string]Tensor{}
	for name, e := range entries {
		if err := e.check(name, int64(len(data))); err != nil {
			return nil, nil, err
		}
		out[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[e.DataOffsets[0]:e.DataOffsets[1]]}
	}
	return out, meta, nil
}

// Int32s encodes values as an I32 tensor of the given shape.
func Int32s(v []int32, shape ...int) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{DType: "I32", Shape: shape, Data: b}
}

// Float32s encodes values as an F32 tensor of the given shape.
func Float32s(v []float32, shape ...int) Tensor {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, v)
	return Tensor{DType: "F32", Shape: shape, Data: buf.Bytes()}
}

// Uint8s wraps bytes as a U8 tensor of the given shape.
func Uint8s(v []uint8, shape ...int) Tensor { return Tensor{DType: "U8", Shape: shape, Data: v} }

// AsInt32 decodes an I32 tensor.
func (t Tensor) AsInt32() ([]int32, error) {
	if t.DType != "I32" {
		return nil, fmt.Errorf("tensor is %s, not I32", t.DType)
	}
	out := make([]int32, len(t.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// Header reads a safetensors file's tensor entries without its data, and
// the offset the data starts at.
func Header(file string) (map[string]Entry, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return nil, 0, fmt.Errorf("%s: header length: %w", file, err)
	}
	if n > 100<<20 {
		return nil, 0, fmt.Errorf("%s: a header of %d bytes is not a safetensors header", file, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, 0, fmt.Errorf("%s: header: %w", file, err)
	}
	entries, _, err := parseHeader(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", file, err)
	}
	return entries, 8 + int64(n), nil
}

// ReadTensor reads one tensor of a safetensors file, and only its bytes.
func ReadTensor(file, name string) (Tensor, error) {
	h, start, err := Header(file)
	if err != nil {
		return Tensor{}, err
	}
	e, ok := h[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%s: no tensor %s", file, name)
	}
	st, err := os.Stat(file)
	if err != nil {
		return Tensor{}, err
	}
	if err := e.check(name, st.Size()-start); err != nil {
		return Tensor{}, fmt.Errorf("%s: %w", file, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return Tensor{}, err
	}
	defer f.Close()
	data := make([]byte, e.DataOffsets[1]-e.DataOffsets[0])
	if _, err := f.ReadAt(data, start+e.DataOffsets[0]); err != nil {
		return Tensor{}, fmt.Errorf("%s: tensor %s: %w", file, name, err)
	}
	return Tensor{DType: e.DType, Shape: e.Shape, Data: data}, nil
}
