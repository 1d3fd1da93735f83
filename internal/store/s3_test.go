package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
)

func newS3(t *testing.T, partSize int64) (*store.S3, *testenv.S3Server) {
	srv := testenv.S3(t)
	s, err := store.NewS3(store.S3Config{Endpoint: srv.Endpoint, Bucket: "t1flow", Prefix: "runs/a", AccessKey: srv.Access, SecretKey: srv.Secret, PathStyle: true, PartSize: partSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, srv
}

func TestS3RoundTripSmallAndMultipart(t *testing.T) {
	ctx := context.Background()
	s, _ := newS3(t, 5<<20)
	ref, err := s.Put(ctx, "x/small.json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref.URI, "s3://t1flow/runs/a/x/small.json") || ref.Bytes != 7 {
		t.Fatalf("ref %+v", ref)
	}
	b, err := s.Get(ctx, ref)
	if err != nil || string(b) != `{"a":1}` {
		t.Fatalf("get %q %v", b, err)
	}
	big := make([]byte, 12<<20) // three parts
	rand.Read(big)
	bref, err := s.Put(ctx, "x/big.bin", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, bref)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("multipart round trip: %v", err)
	}
	l, err := s.Lookup(ctx, "x/big.bin")
	if err != nil || l != bref {
		t.Fatalf("lookup %+v %v, want %+v", l, err, bref)
	}
	if _, err := s.Lookup(ctx, "x/missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	for i := 0; i < 2; i++ { // the second deletes nothing, and is no error
		if err := s.Delete(ctx, "x/big.bin"); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if _, err := s.Lookup(ctx, "x/big.bin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted key still found: %v", err)
	}
}

func TestS3CorruptionDetected(t *testing.T) {
	ctx := context.Background()
	s, srv := newS3(t, 0)
	ref, err := s.Put(ctx, "c/obj.txt", strings.NewReader("the original bytes"))
	if err != nil {
		t.Fatal(err)
	}
	// Change the object behind the store's back, on the server's disk.
	p := filepath.Join(srv.Root, "t1flow", "runs", "a", "c", "obj.txt")
	if err := os.WriteFile(p, []byte("the tampered bytes!"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, ref)
	var ce *store.ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("want a checksum error, got %v", err)
	}
}

type brokenReader struct{ left int }

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), b.left)
	b.left -= n
	return n, nil
}

func TestS3InterruptedWriteNeverVisible(t *testing.T) {
	ctx := context.Background()
	s, _ := newS3(t, 5<<20)
	if _, err := s.Put(ctx, "i/partial.bin", &brokenReader{left: 11 << 20}); err == nil {
		t.Fatal("want the interrupted write to fail")
	}
	if _, err := s.Lookup(ctx, "i/partial.bin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an interrupted write is visible: %v", err)
	}
	// An upload that dies on the network side: cancel it mid-flight.
	big := make([]byte, 16<<20)
	cctx, cancel := context.WithCancel(ctx)
	r := &cancelAfter{r: bytes.NewReader(big), n: 7 << 20, cancel: cancel}
	if _, err := s.Put(cctx, "i/cancelled.bin", r); err == nil {
		t.Fatal("want the cancelled upload to fail")
	}
	if _, err := s.Lookup(ctx, "i/cancelled.bin"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a cancelled upload is visible: %v", err)
	}
}

// cancelAfter cancels the upload's context once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n -= k
	if c.n <= 0 {
		c.cancel()
	}
	return k, err
}
