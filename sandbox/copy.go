package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
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
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > max {
			return nil, fmt.Errorf("%s is %d bytes, more than the %d a result file may have", h.Name, h.Size, max)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		// CopyFromContainer roots the tar at the copied directory's base name.
		name := h.Name
		if i := strings.Index(name, "/"); i >= 0 {
			name = name[i+1:]
		}
		out[name] = data
	}
}
