// Package store is the artifact store behind the claim check: workflows carry
// a Ref, never the bytes. The local default is a directory; writes are atomic
// (temp file, fsync, rename) and reads verify the sha256 in the Ref.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Ref points at one stored object. It is what workflow histories carry.
type Ref struct {
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ErrNotFound is returned by Get for a key that was never written.
var ErrNotFound = errors.New("artifact not found")

// ChecksumError is returned when stored bytes no longer match their Ref.
type ChecksumError struct {
	URI       string
	Want, Got string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("artifact %s is corrupt: sha256 %s, expected %s (re-create it; do not trust its contents)", e.URI, e.Got, e.Want)
}

// Store keeps artifacts by key ("tasks/abc.tar", "sweeps/x/results.json").
type Store interface {
	Put(ctx context.Context, key string, r io.Reader) (Ref, error)
	Get(ctx context.Context, ref Ref) ([]byte, error)
	// Lookup returns the Ref of key, or ErrNotFound.
	Lookup(ctx context.Context, key string) (Ref, error)
}

// Deleter is a Store that removes objects (both stores t1flow ships are).
// Delete of a key that is not there is no error, so a retried deletion
// finishes what a crash cut short.
type Deleter interface {
	Delete(ctx context.Context, key string) error
}

// Local is a Store in a directory.
type Local struct{ Root string }

// NewLocal creates the directory if needed.
func NewLocal(root string) (*Local, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("artifact store %s: %w", abs, err)
	}
	return &Local{Root: abs}, nil
}

func (l *Local) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)[1:]
	if clean == "" || clean != strings.TrimPrefix(key, "/") {
		return "", fmt.Errorf("artifact key %q is not a clean relative path", key)
	}
	return filepath.Join(l.Root, filepath.FromSlash(clean)), nil
}

func (l *Local) uri(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

// Put writes atomically: readers see the old object or the whole new one, never a part.
func (l *Local) Put(ctx context.Context, key string, r io.Reader) (Ref, error) {
	p, err := l.path(key)
	if err != nil {
		return Ref{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return Ref{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return Ref{}, err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Ref{}, fmt.Errorf("write artifact %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return Ref{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// The sidecar lets Lookup answer without rehashing large objects.
	side, _ := json.Marshal(Ref{URI: l.uri(p), SHA256: sum, Bytes: n})
	if err := writeAtomic(p+".ref", side); err != nil {
		return Ref{}, err
	}
	return Ref{URI: l.uri(p), SHA256: sum, Bytes: n}, nil
}

// Get reads the object and checks its size and sha256 against the Ref.
func (l *Local) Get(ctx context.Context, ref Ref) ([]byte, error) {
	u, err := url.Parse(ref.URI)
	if err != nil || u.Scheme != "file" {
		return nil, fmt.Errorf("artifact uri %q: the local store reads file:// URIs only", ref.URI)
	}
	b, err := os.ReadFile(u.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", ref.URI, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return b, Verify(ref, b)
}

// Lookup finds a key written earlier.
func (l *Local) Lookup(ctx context.Context, key string) (Ref, error) {
	p, err := l.path(key)
	if err != nil {
		return Ref{}, err
	}
	b, err := os.ReadFile(p + ".ref")
	if errors.Is(err, os.ErrNotExist) {
		return Ref{}, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Ref{}, err
	}
	var ref Ref
	if err := json.Unmarshal(b, &ref); err != nil {
		return Ref{}, fmt.Errorf("%s.ref: %w", p, err)
	}
	return ref, nil
}

// Delete removes key and its sidecar; the emptied directories above it go too.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	for _, f := range []string{p, p + ".ref"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delete artifact %s: %w", key, err)
		}
	}
	for d := filepath.Dir(p); d != l.Root && strings.HasPrefix(d, l.Root); d = filepath.Dir(d) {
		if os.Remove(d) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

// Verify checks bytes against a Ref.
func Verify(ref Ref, b []byte) error {
	sum := sha256.Sum256(b)
	got := hex.EncodeToString(sum[:])
	if got != ref.SHA256 || int64(len(b)) != ref.Bytes {
		return &ChecksumError{URI: ref.URI, Want: ref.SHA256, Got: got}
	}
	return nil
}

func writeAtomic(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// PutJSON stores v as indented JSON.
func PutJSON(ctx context.Context, s Store, key string, v any) (Ref, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Ref{}, err
	}
	return s.Put(ctx, key, strings.NewReader(string(b)))
}

// GetJSON reads and decodes a JSON artifact.
func GetJSON(ctx context.Context, s Store, ref Ref, v any) error {
	b, err := s.Get(ctx, ref)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("artifact %s: %w", ref.URI, err)
	}
	return nil
}
