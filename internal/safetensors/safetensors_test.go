package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadTensor reads one tensor's bytes from a file as Read decodes them, and
// a truncated file or a missing name is an error naming the file.
func TestReadTensorReadsOneTensor(t *testing.T) {
	var b bytes.Buffer
	a, c := Float32s([]float32{1, 2, 3, 4}, 2, 2), Int32s([]int32{7, 8, 9}, 3)
	if err := Write(&b, map[string]Tensor{"a": a, "c": c}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "x.safetensors")
	os.WriteFile(file, b.Bytes(), 0o644)
	got, err := ReadTensor(file, "c")
	if err != nil || got.DType != "I32" || len(got.Shape) != 1 || got.Shape[0] != 3 || !bytes.Equal(got.Data, c.Data) {
		t.Fatalf("c: %+v %v", got, err)
	}
	h, _, err := Header(file)
	if err != nil || len(h) != 2 || h["a"].DType != "F32" {
		t.Fatalf("header %v %v", h, err)
	}
	if _, err := ReadTensor(file, "b"); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("missing tensor: %v", err)
	}
	os.WriteFile(file, b.Bytes()[:b.Len()-4], 0o644)
	if _, err := ReadTensor(file, "c"); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated file: %v", err)
	}
}
