package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/t1flow/t1flow/internal/task"
)

// ToolchainExecEnv is the Env of every sealed docker exec: the first process
// (the toolchain's env) must not be started with a preload from the image.
var ToolchainExecEnv = []string{"LD_PRELOAD=", "LD_LIBRARY_PATH=", "LD_AUDIT="}

// ToolchainKillCmd stops every process left from the agent phase (kill -9 -1,
// twice, from the toolchain's bash: the container's own bash and kill are
// the agent's to replace) and changes nothing on disk, so the tamper check
// that follows sees the filesystem as the agent left it, with nothing of the
// agent's left running to change it behind the check. Run it as root, with
// Env ToolchainExecEnv.
func ToolchainKillCmd() []string {
	return toolchainSh(`kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; exit 0`)
}

// ToolchainSurveyCmd is the first exec of a sealed verification: it counts
// the sockets something in the sandbox serves on (TCP listening, UDP bound:
// /proc/net of the sandbox's network namespace, read with the toolchain's
// bash builtins alone) and prints "<ToolchainSurveyLine> <n>" on stdout. With
// none, it then stops every agent process as ToolchainKillCmd does, so a
// sandbox with no service costs the same one exec as before. With some, it
// stops nothing: the agent left a service the tests may talk to, and the
// verifier runs beside it in a container of its own (Docker.StartLiveVerifier).
// Docker's embedded DNS (127.0.0.11) is not the agent's and is not counted.
// Run it as root, with Env ToolchainExecEnv.
func ToolchainSurveyCmd() []string {
	return toolchainSh(`n=0
for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
  [ -r "$f" ] || continue
  want=0A; case $f in *udp*) want=07;; esac
  while read -r _ local _ st _; do
    [ "$st" = "$want" ] || continue
    case $local in 0B00007F:*) continue;; esac
    n=$((n+1))
  done < "$f"
done
echo "` + ToolchainSurveyLine + ` $n"
[ "$n" = 0 ] || exit 0
kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; exit 0`)
}

// ToolchainSurveyLine starts ToolchainSurveyCmd's answer.
const ToolchainSurveyLine = "t1flow-serving"

// ParseSurvey reads ToolchainSurveyCmd's stdout: how many sockets were
// served, and whether the answer was complete (a survey killed half way, by
// the agent's processes or the pids limit, says nothing: verify as if none).
func ParseSurvey(stdout string) (serving int, ok bool) {
	for _, line := range strings.Split(stdout, "\n") {
		if v, found := strings.CutPrefix(line, ToolchainSurveyLine+" "); found {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}

// ToolchainStage is a fresh name for the directory at / the task's tests are
// copied into before ToolchainRunCmd moves it to /tests: random, so nothing
// in the sandbox could have prepared that path.
func ToolchainStage() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "/.t1flow-tests-" + hex.EncodeToString(b)
}

// ToolchainReady is the line ToolchainRunCmd writes on its standard output,
// the only thing ever written there, once the verifier's places are ready
// and just before test.sh starts.
const ToolchainReady = "t1flow-verifier-ready"

// ToolchainRunCmd is one exec that readies the verifier and runs it: with
// only the toolchain's shell and coreutils it stops every process again,
// empties /tests, verifierDir and the scratch directory, moves the tests
// copied into stage (ToolchainStage) to /tests, changes to
// workDir (the image's WORKDIR; "" is /), writes ToolchainReady on stdout,
// and then execs the channel relay (ToolchainRelay), which runs verify
// (ToolchainVerifyCmd) with its stdout joined to stderr and, as descriptor
// ToolchainChannelFD, a socket whose lines the relay passes on to the exec's
// stdout: the runner's report channel (ParseRunnerChannel). The ready line therefore
// comes first: without it the preparation failed, and the results
// directory may still hold what the agent left. Run it as root, with Env ToolchainExecEnv,
// in /.
//
// user (VerifierUser's answer, "" for root) is who runs test.sh, as Harbor's
// docker exec -u would: the toolchain's setpriv takes on its UID, primary
// group and supplementary groups (by the sandbox's /etc/passwd and
// /etc/group; a bare UID with no entry gets group 0 and none), and the
// verifier's places (emptied and made afresh just before) are given to it.
// A user or a named group the sandbox does not know ends the run after the
// ready line with exit 4 and says so on stderr, naming verifier.user: no
// results, so a VerifierError that names it (not chown's "invalid group").
func ToolchainRunCmd(verifierDir, stage, workDir, user string, verify []string) []string {
	if workDir == "" {
		workDir = "/"
	}
	places := verifierDir + ` ` + ToolchainRunDir + ` ` + ToolchainRunDir + `/uv-cache`
	script := `kill -9 -1 2>/dev/null; ` +
		`rm -rf /tests ` + verifierDir + ` ` + ToolchainRunDir + ` && mkdir -p ` + verifierDir + ` ` + ToolchainRunDir + `/uv-cache && ` +
		`mv ` + stage + ` /tests && cd -- "$1" || exit 1; u=$2; shift 2; ` +
		`echo ` + ToolchainReady + ` || exit 1; ` +
		`if [ -n "$u" ]; then ` +
		`n=${u%%:*}; g=; [ "$n" = "$u" ] || g=${u#*:}; ` +
		`if id -u -- "$n" >/dev/null 2>&1; then gs=--init-groups; [ -n "$g" ] || g=$(id -g -- "$n"); ` +
		`elif [[ $n =~ ^[0-9]+$ ]]; then gs=--clear-groups; [ -n "$g" ] || g=0; ` +
		`else echo "t1flow: the verifier's user $n (verifier.user, else the image's USER) is not in the sandbox's /etc/passwd: tests/test.sh did not run" >&2; exit 4; fi; ` +
		`if ! [[ $g =~ ^[0-9]+$ ]] && ! G="$g" gawk -F: '($1 "") == (ENVIRON["G"] "") { f = 1 } END { exit !f }' /etc/group; then ` +
		`echo "t1flow: the verifier's group $g (verifier.user, else the image's USER) is not in the sandbox's /etc/group: tests/test.sh did not run" >&2; exit 4; fi; ` +
		`chown -- "$n:$g" ` + places + ` || exit 1; ` +
		`set -- setpriv --reuid="$n" --regid="$g" "$gs" -- "$@"; fi; ` +
		`exec ` + ToolchainMount + `/bin/python3 -I -S ` + ToolchainRelay + ` "$@" ` + strconv.Itoa(ToolchainChannelFD) + `>&1 >&2`
	return append(append(toolchainSh(script), workDir, user), verify...)
}

// ToolchainRelay is the program ToolchainRunCmd hands the channel to (the
// toolchain's libexec/t1flow_relay.py): it runs as root, non-dumpable, holds
// the exec's stdout itself, and gives test.sh a socket in its place whose
// other end only the relay holds, passing on what arrives there. A socket
// cannot be opened again through /proc/<pid>/fd and the pair has no address,
// so a process the tests start (test.sh's user, no CAP_SYS_PTRACE) reaches
// the host through no descriptor of test.sh's bash, timeout or uv, nor of
// the relay's.
const ToolchainRelay = ToolchainMount + "/libexec/t1flow_relay.py"

// VerifierUser is who runs tests/test.sh, as Harbor picks it: the task's
// verifier.user, else the image's USER (ImageUser), else root; "" for root,
// by name or UID.
func VerifierUser(taskUser, imageUser string) string {
	u := taskUser
	if u == "" {
		u = imageUser
	}
	if name, _, _ := strings.Cut(u, ":"); name == "root" || name == "0" {
		// root's own group (u = "0:0", "root") or another (rare): root
		// either way, with the group Docker would give it ignored.
		return ""
	}
	return u
}

// toolchainSh is the toolchain's bash running script with nothing inherited
// but a PATH of the toolchain's own commands; arguments after it are $@.
func toolchainSh(script string) []string {
	m := ToolchainMount
	return []string{m + "/bin/env", "-i", "PATH=" + m + "/bin", m + "/bin/bash", "--norc", "--noprofile", "-c", script, "t1flow-verify"}
}

// toolchainDroppedEnv are variables (exact names, or prefixes ending in _
// or named in toolchainDroppedPrefixes) that can make an interpreter, the
// loader or the shell run code or read configuration of someone else's
// choosing. The sealed verifier sets its own PATH, HOME and PYTHONPATH.
var toolchainDroppedEnv = []string{
	"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "IFS", "GLOBIGNORE", "PROMPT_COMMAND",
	"GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES", "HOSTALIASES", "RES_OPTIONS", "VIRTUAL_ENV",
	"HOME", "PATH", "TMPDIR", "CURL_HOME", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PERLLIB", "RUBYOPT",
	"NODE_OPTIONS", "LD_", "MALLOC_", "UV_", "PIP_", "PYTEST_", "XDG_", "SSL_CERT_", "T1FLOW_",
}

var toolchainDroppedPrefixes = []string{"PYTHON", "CONDA", "PERL5"}

func toolchainDropVar(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	for _, d := range toolchainDroppedEnv {
		if k == d || strings.HasSuffix(d, "_") && strings.HasPrefix(k, d) {
			return true
		}
	}
	for _, d := range toolchainDroppedPrefixes {
		if strings.HasPrefix(k, d) {
			return true
		}
	}
	return false
}

// ToolchainResultsDir is where test.sh writes its results (Harbor's
// /logs/verifier): the guard reports writes there by the agent's code.
const ToolchainResultsDir = "/logs/verifier"

// ToolchainVerifyCmd is the command line that runs tests/test.sh sealed: the
// toolchain's env starts, with nothing inherited, the toolchain's timeout and
// bash. imageEnv is the image's Config.Env (ContainerInspect), verifierEnv
// the task's verifier.env as KEY=VALUE; variables that could redirect an
// interpreter, loader or shell are dropped from both and returned, so the
// caller can say so. ini is ToolchainPytestIni's answer.
//
// user is VerifierUser's answer: USER and LOGNAME name it ("" is root).
func ToolchainVerifyCmd(imageEnv, verifierEnv []string, timeout time.Duration, ini, user string) (cmd []string, dropped []string) {
	env := []string{}
	for _, kv := range append(append([]string{}, imageEnv...), verifierEnv...) {
		if toolchainDropVar(kv) {
			if !strings.HasPrefix(kv, "PATH=") { // PATH is kept, after the toolchain's
				dropped = append(dropped, kv)
			}
			continue
		}
		env = append(env, kv)
	}
	imagePath := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range imageEnv {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			imagePath = v
		}
	}
	m := ToolchainMount
	name, _, _ := strings.Cut(user, ":")
	if name == "" {
		name = "root"
	}
	env = append(env,
		"PATH="+m+"/bin:"+imagePath,
		"HOME="+m+"/home",
		"USER="+name, "LOGNAME="+name,
		"PYTHONNOUSERSITE=1",
		"PYTHONPATH="+m+"/plugins",
		"PYTEST_ADDOPTS=-c "+ini+" --rootdir=/tests --confcutdir=/tests -p no:cacheprovider -p t1flow_mark",
		"T1FLOW_RUNNER_MARK="+ToolchainRunnerMark,
		"T1FLOW_CHANNEL_FD="+strconv.Itoa(ToolchainChannelFD),
		"T1FLOW_RESULTS_DIR="+ToolchainResultsDir,
		"T1FLOW_TRUSTED_CODE="+m+":"+ToolchainRunDir+":/tests",
		"UV_CACHE_DIR="+ToolchainRunDir+"/uv-cache",
	)
	sort.Strings(dropped)
	secs := strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64)
	cmd = append([]string{m + "/bin/env", "-i"}, env...)
	// test.sh is sourced, not run as a script file: bash reads a script as
	// it runs it, so a line the tested code appended to /tests/test.sh ran
	// after pytest, outside its Landlock domain and holding the channel;
	// `.` reads the whole file first. $0 and BASH_SOURCE stay the path.
	cmd = append(cmd, m+"/bin/timeout", "-k", "5", secs, m+"/bin/bash", "--norc", "--noprofile", "-c", `. "$0"`, "/tests/test.sh")
	return cmd, dropped
}

// ToolchainPytestIni is the configuration file the sealed pytest is told to
// read (-c): the task's own, when its tests/ ship one, else the toolchain's
// empty one. Either way pytest never looks for one above /tests, where the
// agent could have planted it. testsDir is the task's tests/ on the host.
func ToolchainPytestIni(testsDir string) string {
	for _, n := range []string{"pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"} {
		b, err := os.ReadFile(filepath.Join(testsDir, n))
		if err != nil {
			continue
		}
		// pyproject.toml, tox.ini and setup.cfg count only with a pytest section,
		// as pytest's own discovery has it.
		switch n {
		case "pyproject.toml":
			if !bytes.Contains(b, []byte("[tool.pytest.ini_options]")) {
				continue
			}
		case "tox.ini", "setup.cfg":
			if !bytes.Contains(b, []byte("[pytest]")) && !bytes.Contains(b, []byte("[tool:pytest]")) {
				continue
			}
		}
		return "/tests/" + n
	}
	return ToolchainMount + "/etc/pytest.ini"
}

// ErrToolchainMissing means a sandbox has no toolchain mount (created before
// the toolchain was wired in): verify it unsealed only knowingly.
var ErrToolchainMissing = errors.New("sandbox has no sealed verifier toolchain mounted at " + ToolchainMount)

// ToolchainHome is where toolchains live: T1FLOW_TOOLCHAIN_HOME, else the
// state directory (toolchains go under its toolchain/).
func ToolchainHome(stateDir string) string {
	if v := os.Getenv("T1FLOW_TOOLCHAIN_HOME"); v != "" {
		return v
	}
	return stateDir
}

// EnsureToolchain builds (or finds) the sealed verifier toolchain for this
// host's base image and mounts it into every sandbox started afterwards.
func (d *Docker) EnsureToolchain(ctx context.Context) (Toolchain, error) {
	if tc := d.toolchain.Load(); tc != nil {
		return *tc, nil
	}
	base, err := d.EnsureBaseImage(ctx)
	if err != nil {
		return Toolchain{}, err
	}
	v, err, _ := d.builds.Do("toolchain:"+base, func() (any, error) {
		tc, err := EnsureToolchain(ctx, d.Client, base, ToolchainHome(d.StateDir))
		if err != nil {
			return nil, err
		}
		d.toolchain.Store(&tc)
		return tc, nil
	})
	if err != nil {
		return Toolchain{}, err
	}
	return v.(Toolchain), nil
}

// SandboxToolchain is the toolchain a sandbox of image img gets mounted,
// nil until EnsureToolchain has run. When test.sh asks uv for a Python
// (python, task.Config.VerifierPython: `uvx -p 3.13`, which Harbor's uv
// downloads), it is the toolchain whose Python serves that request
// (task.VerifierBase: trixie's 3.13 for 3.12 and newer, bookworm's 3.11 for
// older), whatever the image's base. Otherwise it follows the image: the
// trixie toolchain (Python 3.13) for an image built on a trixie base (FROM
// python:3.13, debian:13 and the other lines the base map sends to trixie;
// docs/task-format.md), else the default (bookworm's Python 3.11). Each is
// built once per host on first use. An image is on a base when its first
// layer is that base's (the base is one imported layer, so every image built
// FROM it starts with it).
func (d *Docker) SandboxToolchain(ctx context.Context, img, python string) (*Toolchain, error) {
	def := d.toolchain.Load()
	if def == nil {
		return nil, nil
	}
	var trixie bool
	if b, _ := task.VerifierBase(python); b != "" {
		trixie = b == task.BaseTrixie
	} else {
		var err error
		if trixie, err = d.onTrixie(ctx, img); err != nil {
			return nil, err
		}
	}
	if !trixie {
		return def, nil
	}
	base := BaseTag(task.BaseTrixie)
	if _, err := d.EnsureBase(ctx, task.BaseTrixie); err != nil {
		return nil, err
	}
	v, err, _ := d.builds.Do("toolchain:"+base, func() (any, error) {
		return EnsureToolchain(ctx, d.Client, base, ToolchainHome(d.StateDir))
	})
	if err != nil {
		return nil, err
	}
	tc := v.(Toolchain)
	return &tc, nil
}

// onTrixie reports whether img starts with the first layer of a trixie base
// image present on this host. An image not found is not (creating its
// container reports that).
func (d *Docker) onTrixie(ctx context.Context, img string) (bool, error) {
	first := func(ref string) (string, error) {
		ins, err := d.Client.ImageInspect(ctx, ref)
		if err != nil || len(ins.RootFS.Layers) == 0 {
			if errdefs.IsNotFound(err) {
				err = nil
			}
			return "", err
		}
		return ins.RootFS.Layers[0], nil
	}
	l, err := first(img)
	if err != nil || l == "" {
		return false, err
	}
	for _, b := range []string{task.BaseTrixie, task.BasePythonTrixie} {
		bl, err := first(BaseTag(b))
		if err != nil {
			return false, err
		}
		if bl == l {
			return true, nil
		}
	}
	return false, nil
}

// HasToolchain reports whether a container has the sealed toolchain mounted
// (sandboxes created before it was wired in do not).
func HasToolchain(mounts []container.MountPoint) bool {
	for _, m := range mounts {
		if m.Destination == ToolchainMount && !m.RW {
			return true
		}
	}
	return false
}
