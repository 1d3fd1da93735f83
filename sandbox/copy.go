package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
)

// CopyIn extracts a tar stream at dst inside the container.
func (d *Docker) CopyIn(ctx context.Context, id, dst string, tarball []byte) error {
	err := d.Client.CopyToContainer(ctx, id, dst, bytes.NewReader(tarball), container.CopyToContainerOptions{})
	if err != nil && (errdefs.IsNotFound(err) || errdefs.IsConflict(err)) {
		return fmt.Errorf("%w: %v", ErrContainerGone, err)
	}
	return err
}

// CopyOut reads src from the container as a tar stream.
func (d *Docker) CopyOut(ctx context.Context, id, src string) ([]byte, error) {
	rc, _, err := d.Client.CopyFromContainer(ctx, id, src)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	return buf.Bytes(), err
}

// SingleFileTar is a tar stream of one executable file, for CopyIn.
func SingleFileTar(name, content string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write([]byte(content))
	tw.Close()
	return buf.Bytes()
}

// UntarFiles reads the regular files of a CopyOut tar, each capped at max
// bytes, named by their path below the copied directory.
func UntarFiles(b []byte, max int64) (map[string][]byte, error) {
	return UntarStream(bytes.NewReader(b), max, int64(len(b)))
}

// ErrCopyRefused wraps what made UntarStream refuse a copy: a file over its
// cap, a stream over its limit, a tar that does not parse. What the
// container holds is at fault, not its host.
var ErrCopyRefused = errors.New("copy refused")

// CopyOutFiles copies src's regular files out of the container as UntarStream
// reads them, straight from Docker's stream: never more than limit bytes of
// it, however large what src holds (a sparse file of a terabyte streams in
// full). A refusal wraps ErrCopyRefused; Docker's own errors do not.
func (d *Docker) CopyOutFiles(ctx context.Context, id, src string, max, limit int64) (map[string][]byte, error) {
	rc, _, err := d.Client.CopyFromContainer(ctx, id, src)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return UntarStream(rc, max, limit)
}

// UntarStream reads the regular files of a CopyOut tar stream as UntarFiles
// does, reading at most limit+1 bytes of r: an entry over max is refused at
// its header, unread, and a stream over limit once it passes it. Those
// refusals, and a tar that does not parse, wrap ErrCopyRefused; an error
// reading r is returned as it came.
func UntarStream(r io.Reader, max, limit int64) (map[string][]byte, error) {
	src := &readErrs{r: r}
	lr := &io.LimitedReader{R: src, N: limit + 1}
	refused := func(err error) error {
		switch {
		case src.err != nil:
			return src.err
		case lr.N <= 0:
			return fmt.Errorf("%w: the copy is more than the %d bytes it may have", ErrCopyRefused, limit)
		}
		return fmt.Errorf("%w: %v", ErrCopyRefused, err)
	}
	out := map[string][]byte{}
	tr := tar.NewReader(lr)
	for {
		h, err := tr.Next()
		if err == io.EOF && src.err == nil && lr.N > 0 {
			return out, nil
		}
		if err != nil {
			return nil, refused(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > max {
			return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a result file may have", ErrCopyRefused, h.Name, h.Size, max)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, refused(err)
		}
		// CopyFromContainer roots the tar at the copied directory's base name.
		name := h.Name
		if i := strings.Index(name, "/"); i >= 0 {
			name = name[i+1:]
		}
		out[name] = data
	}
}

// readErrs keeps the first error of r other than io.EOF: the host's, not the
// tar's.
type readErrs struct {
	r   io.Reader
	err error
}

func (e *readErrs) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}
