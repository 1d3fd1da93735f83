package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/docker/client"
)

// An NSS module the agent added or changed can no longer reach the verifier
// (the toolchain's loader searches only the toolchain, toolchainLoaderPatches),
// but it is loaded into every container program a test runs that looks up
// a user, so one that no real package contains is still flagged. Legitimate
// installs are told from planted files by the packages themselves: the
// sandbox's dpkg records say which package and version own the file (a hint
// only: they are the agent's to edit), the host fetches that exact .deb
// from the Debian mirror, and the file must be byte for byte (a symlink: the
// same target) what the package ships. The sandbox's own checksums
// (/var/lib/dpkg/info/*.md5sums) are never trusted.

// DebianMirrors are the pool roots packages are fetched from, in order:
// T1FLOW_DEBIAN_MIRRORS (space-separated), or the apt sources' mirror
// (AptMirror) and, beside it, its security archive.
func DebianMirrors() []string {
	if v := strings.Fields(os.Getenv("T1FLOW_DEBIAN_MIRRORS")); len(v) > 0 {
		return v
	}
	m := strings.TrimRight(AptMirror(), "/")
	if root, ok := strings.CutSuffix(m, "/debian"); ok {
		return []string{m, root + "/debian-security"}
	}
	return []string{m}
}

// DebCache holds the .deb files fetched to check a sandbox's files against,
// one directory per host (shared by every sandbox: a package is fetched once).
type DebCache struct {
	Dir     string
	Mirrors []string // nil: DebianMirrors()
	mu      sync.Mutex
}

// debPackage is one installed package as the sandbox's dpkg status has it.
type debPackage struct{ Name, Arch, Version, Source string }

// File names the .deb as the archive's pool stores it (no epoch).
func (p debPackage) File() string {
	v := p.Version
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	return p.Name + "_" + v + "_" + p.Arch + ".deb"
}

// poolPath is the package's place under a mirror's root.
func (p debPackage) poolPath(updates bool) string {
	src := p.Source
	if src == "" {
		src = p.Name
	}
	prefix := src[:1]
	if strings.HasPrefix(src, "lib") && len(src) > 3 {
		prefix = src[:4]
	}
	dir := "pool/main/"
	if updates {
		dir = "pool/updates/main/"
	}
	return dir + prefix + "/" + src + "/" + p.File()
}

// parseDpkgStatus reads /var/lib/dpkg/status into the installed packages
// by "name:arch".
func parseDpkgStatus(b []byte) map[string]debPackage {
	out := map[string]debPackage{}
	for _, stanza := range strings.Split(string(b), "\n\n") {
		var p debPackage
		installed := false
		for _, l := range strings.Split(stanza, "\n") {
			k, v, ok := strings.Cut(l, ": ")
			if !ok {
				continue
			}
			switch k {
			case "Package":
				p.Name = v
			case "Architecture":
				p.Arch = v
			case "Version":
				p.Version = v
			case "Source":
				p.Source, _, _ = strings.Cut(v, " ") // "systemd (252.30-1)"
			case "Status":
				installed = strings.HasSuffix(v, " installed")
			}
		}
		if p.Name != "" && installed {
			out[p.Name+":"+p.Arch] = p
		}
	}
	return out
}

// usrMerged is the path with /lib, /lib64, /bin and /sbin under /usr, as a
// merged-/usr system resolves them (dpkg lists either spelling).
func usrMerged(p string) string {
	for _, d := range []string{"/lib/", "/lib64/", "/bin/", "/sbin/"} {
		if strings.HasPrefix(p, d) {
			return "/usr" + p
		}
	}
	return p
}

// debFile is one file of a package or a sandbox: its sha256, or for a
// symlink its target.
type debFile struct {
	Sum, Link string
}

func (f debFile) String() string {
	if f.Link != "" {
		return "a symlink to " + f.Link
	}
	return "sha256 " + f.Sum[:16]
}

// fetch returns the .deb's path in the cache, downloading it on first use.
func (c *DebCache) fetch(ctx context.Context, p debPackage) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dst := filepath.Join(c.Dir, p.File())
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", err
	}
	mirrors := c.Mirrors
	if mirrors == nil {
		mirrors = DebianMirrors()
	}
	var tried []string
	absent := true // every mirror answered that it has no such file
	for _, m := range mirrors {
		for _, updates := range []bool{false, true} {
			url := strings.TrimRight(m, "/") + "/" + p.poolPath(updates)
			tried = append(tried, url)
			err := debDownload(ctx, url, dst)
			if err == nil {
				return dst, nil
			}
			absent = absent && errors.Is(err, errDebAbsent)
		}
	}
	err := fmt.Errorf("package %s %s is on none of the mirrors (T1FLOW_DEBIAN_MIRRORS): tried %s", p.Name, p.Version, strings.Join(tried, ", "))
	if absent {
		return "", fmt.Errorf("%w: %w", errDebAbsent, err)
	}
	return "", err
}

// errDebAbsent is a package every mirror answered it does not have (404 or
// 410): a version the sandbox's dpkg status names that Debian never
// shipped, which the agent can write. Anything else (no answer, a 5xx) is
// the host's, not the agent's.
var errDebAbsent = errors.New("no mirror has it")

// validDeb is a package whose name, version, architecture and source are
// Debian's characters only: the fields come from the sandbox's dpkg status,
// which the agent can write, and they name a path in the host's cache.
func validDeb(p debPackage) bool {
	ok := func(s string, extra string) bool {
		if s == "" || strings.Contains(s, "..") {
			return false
		}
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
				return false
			}
		}
		return true
	}
	return ok(p.Name, "+-.") && ok(p.Arch, "-") && ok(p.Version, "ABCDEFGHIJKLMNOPQRSTUVWXYZ+-.~:") &&
		(p.Source == "" || ok(p.Source, "+-."))
}

func debDownload(ctx context.Context, url, dst string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
		return fmt.Errorf("%s: %s: %w", url, resp.Status, errDebAbsent)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, io.LimitReader(resp.Body, 512<<20))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// debContents lists the .deb's files by their usr-merged path, read with the
// host's dpkg-deb.
func debContents(ctx context.Context, deb string) (map[string]debFile, error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dpkg-deb (the host's, to read %s): %v: install dpkg", filepath.Base(deb), err)
	}
	files := map[string]debFile{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return nil, fmt.Errorf("read %s: %v %s", deb, err, stderr.String())
		}
		p := usrMerged(path.Clean("/" + h.Name))
		switch h.Typeflag {
		case tar.TypeSymlink:
			files[p] = debFile{Link: h.Linkname}
		case tar.TypeReg:
			s := sha256.New()
			io.Copy(s, tr)
			files[p] = debFile{Sum: fmt.Sprintf("%x", s.Sum(nil))}
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v %s", deb, err, stderr.String())
	}
	return files, nil
}

// containerFile reads one file of the container as a debFile.
func containerFile(ctx context.Context, cli *client.Client, id, p string) (debFile, error) {
	rc, _, err := cli.CopyFromContainer(ctx, id, p)
	if err != nil {
		return debFile{}, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return debFile{}, err
	}
	if h.Typeflag == tar.TypeSymlink {
		return debFile{Link: h.Linkname}, nil
	}
	s := sha256.New()
	if _, err := io.Copy(s, io.LimitReader(tr, 256<<20)); err != nil {
		return debFile{}, err
	}
	return debFile{Sum: fmt.Sprintf("%x", s.Sum(nil))}, nil
}

// PackageOwned checks files the agent added or changed against the real
// Debian packages the sandbox says own them, and returns, for each file that
// is not exactly what its package ships, why. lists are the dpkg file lists
// (/var/lib/dpkg/info/*.list) the agent phase added or changed: a package
// installed or upgraded then rewrote its list. A file no such list names is
// owned by no package installed in the agent phase.
func (c *DebCache) PackageOwned(ctx context.Context, cli *client.Client, id string, files, lists []string) (map[string]string, error) {
	bad := map[string]string{}
	if len(files) == 0 {
		return bad, nil
	}
	status, err := tamperReadFileMax(ctx, cli, id, "/var/lib/dpkg/status", 64<<20)
	if err != nil {
		for _, f := range files {
			bad[f] = "no dpkg status to say which package owns it"
		}
		return bad, nil
	}
	pkgs := parseDpkgStatus(status)
	owner := map[string]debPackage{}
	for _, l := range lists {
		b, err := tamperReadFileMax(ctx, cli, id, l, 16<<20)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(path.Base(l), ".list")
		pkg, ok := pkgs[name]
		if !ok {
			for k, p := range pkgs { // "libc6.list" is libc6:amd64
				if strings.HasPrefix(k, name+":") {
					pkg, ok = p, true
				}
			}
		}
		if !ok {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, f := range files {
				if line != "" && usrMerged(line) == usrMerged(f) {
					owner[f] = pkg
				}
			}
		}
	}
	contents := map[string]map[string]debFile{}
	for _, f := range files {
		pkg, ok := owner[f]
		if !ok {
			bad[f] = "no package installed or upgraded in the agent phase lists it"
			continue
		}
		if !validDeb(pkg) {
			bad[f] = fmt.Sprintf("the sandbox's dpkg status names its package %q %q (%s): not a Debian package's name and version", pkg.Name, pkg.Version, pkg.Arch)
			continue
		}
		want, ok := contents[pkg.File()]
		if !ok {
			deb, err := c.fetch(ctx, pkg)
			if errors.Is(err, errDebAbsent) {
				bad[f] = fmt.Sprintf("the sandbox says %s %s owns it, but no mirror has that package (%v)", pkg.Name, pkg.Version, err)
				continue
			}
			if err != nil {
				return nil, err
			}
			if want, err = debContents(ctx, deb); err != nil {
				return nil, err
			}
			contents[pkg.File()] = want
		}
		exp, ok := want[usrMerged(f)]
		if !ok {
			bad[f] = fmt.Sprintf("the sandbox says %s %s owns it, but that package (from the mirror) has no such file", pkg.Name, pkg.Version)
			continue
		}
		got, err := containerFile(ctx, cli, id, f)
		if err != nil {
			return nil, err
		}
		if got != exp {
			bad[f] = fmt.Sprintf("is %s, but %s %s (from the mirror) ships %s", got, pkg.Name, pkg.Version, exp)
		}
	}
	return bad, nil
}
