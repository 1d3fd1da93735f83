package store

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocalRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.Put(ctx, "a/b.txt", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Bytes != 5 || ref.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatalf("bad ref %+v", ref)
	}
	b, err := s.Get(ctx, ref)
	if err != nil || string(b) != "hello" {
		t.Fatalf("got %q, %v", b, err)
	}
	got, err := s.Lookup(ctx, "a/b.txt")
	if err != nil || got != ref {
		t.Fatalf("lookup %+v %v", got, err)
	}
	if _, err := s.Lookup(ctx, "a/missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	ctx := context.Background()
	s, _ := NewLocal(t.TempDir())
	ref, _ := s.Put(ctx, "x.json", strings.NewReader(`{"a":1}`))
	u, _ := url.Parse(ref.URI)
	os.WriteFile(u.Path, []byte(`{"a":2}`), 0o644)
	_, err := s.Get(ctx, ref)
	var ce *ChecksumError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("want a checksum error, got %v", err)
	}
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n > 0 {
		f.n--
		return copy(p, "partial data "), nil
	}
	return 0, io.ErrUnexpectedEOF
}

func TestInterruptedWriteNeverVisible(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, _ := NewLocal(root)
	old, _ := s.Put(ctx, "k.bin", strings.NewReader("complete v1"))
	if _, err := s.Put(ctx, "k.bin", &failingReader{n: 3}); err == nil {
		t.Fatal("want the write to fail")
	}
	ref, err := s.Lookup(ctx, "k.bin")
	if err != nil || ref != old {
		t.Fatalf("the old object should stay: %+v %v", ref, err)
	}
	b, err := s.Get(ctx, ref)
	if err != nil || string(b) != "complete v1" {
		t.Fatalf("got %q %v", b, err)
	}
	left, _ := filepath.Glob(filepath.Join(root, ".tmp-*"))
	if len(left) > 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
	if _, err := s.Put(ctx, "../escape", strings.NewReader("x")); err == nil {
		t.Fatal("want keys outside the root refused")
	}
}

func TestLocalDelete(t *testing.T) {
	ctx := context.Background()
	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c/k/a.bin", strings.NewReader("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "c/other.bin", strings.NewReader("o")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // a retried deletion is no error
		if err := s.Delete(ctx, "c/k/a.bin"); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if _, err := s.Lookup(ctx, "c/k/a.bin"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted key still found: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Root, "c", "k")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("emptied directory left behind: %v", err)
	}
	if _, err := s.Lookup(ctx, "c/other.bin"); err != nil {
		t.Fatalf("a neighbour was deleted: %v", err)
	}
	if err := s.Delete(ctx, "../x"); err == nil {
		t.Fatal("a key outside the store was accepted")
	}
}
