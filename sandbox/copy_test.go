package sandbox_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/sandbox"
)

// endlessTar is a CopyFromContainer stream that never ends: entry after
// entry of size zero bytes (a sparse file streams its holes in full), made as
// it is read, so the test holds no more of it than one header.
type endlessTar struct {
	size    int64 // of each entry, a multiple of 512
	pending bytes.Buffer
	zeros   int64
	entries int
	read    int64
}

func (e *endlessTar) Read(p []byte) (int, error) {
	if e.pending.Len() == 0 && e.zeros == 0 {
		e.entries++
		tw := tar.NewWriter(&e.pending)
		tw.WriteHeader(&tar.Header{Name: "verifier/f" + strings.Repeat("x", e.entries%7), Mode: 0o644, Size: e.size, Typeflag: tar.TypeReg})
		tw.Flush()
		e.zeros = e.size
	}
	var n int
	if e.pending.Len() > 0 {
		n, _ = e.pending.Read(p)
	} else {
		n = len(p)
		if int64(n) > e.zeros {
			n = int(e.zeros)
		}
		clear(p[:n])
		e.zeros -= int64(n)
	}
	e.read += int64(n)
	return n, nil
}

// TestUntarStreamStopsAtItsLimit: what the tests leave in /logs/verifier
// (truncate -s 1T) is read from Docker's stream no further than the limit;
// before, CopyOut read the whole stream into memory and only UntarFiles
// refused it afterwards: the worker ran out of memory first.
func TestUntarStreamStopsAtItsLimit(t *testing.T) {
	const max, limit = 4 << 20, 16 << 20
	for _, tc := range []struct {
		name string
		size int64
		most int64 // bytes of the stream it may read
	}{
		{"one file of a terabyte", 1 << 40, 64 << 10},
		{"files under the cap without end", 1 << 20, limit + 64<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &endlessTar{size: tc.size}
			files, err := sandbox.UntarStream(r, max, limit)
			t.Logf("read %d bytes of the stream, %d entries: %v", r.read, r.entries, err)
			if !errors.Is(err, sandbox.ErrCopyRefused) || files != nil {
				t.Fatalf("got %d files, %v; want ErrCopyRefused", len(files), err)
			}
			if r.read > tc.most {
				t.Fatalf("read %d bytes of an endless stream, more than %d", r.read, tc.most)
			}
		})
	}
	if _, err := sandbox.UntarStream(&endlessTar{size: 1 << 20}, max, limit); err == nil || !strings.Contains(err.Error(), "16777216 bytes") {
		t.Fatalf("the refusal names no limit: %v", err)
	}
}

// TestUntarStreamKeepsHostErrors: an error reading Docker's stream is the
// host's, not wrapped as a refusal; a stream within its limit is read whole.
func TestUntarStreamKeepsHostErrors(t *testing.T) {
	tarball := sandbox.SingleFileTar("verifier/reward.txt", "1\n")
	files, err := sandbox.UntarStream(bytes.NewReader(tarball), 4<<20, int64(len(tarball)))
	if err != nil || string(files["reward.txt"]) != "1\n" {
		t.Fatalf("got %q, %v", files, err)
	}
	broken := errors.New("connection reset")
	_, err = sandbox.UntarStream(io.MultiReader(bytes.NewReader(tarball[:700]), iotestErr{broken}), 4<<20, 16<<20)
	if !errors.Is(err, broken) || errors.Is(err, sandbox.ErrCopyRefused) {
		t.Fatalf("a broken stream: %v; want the host's error", err)
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

func TestWithPID1OOMResetPrefixesTheScript(t *testing.T) {
	for _, argv := range [][]string{sandbox.ToolchainSurveyCmd(), sandbox.ToolchainKillCmd()} {
		got := sandbox.WithPID1OOMReset(argv)
		if len(got) != len(argv) || got[len(got)-1] != argv[len(argv)-1] {
			t.Fatalf("%q", got)
		}
		var script string
		for i := range got {
			if got[i] == "-c" {
				script = got[i+1]
			}
		}
		if !strings.HasPrefix(script, "trap '{ echo 0 >/proc/1/oom_score_adj; } 2>/dev/null' EXIT\n") || !strings.HasSuffix(script, argv[len(argv)-2]) {
			t.Fatalf("script %q", script)
		}
	}
}
