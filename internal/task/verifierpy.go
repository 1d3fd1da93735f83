package task

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// pyVersion is the major.minor a uv Python request names: "3.13",
// "3.13.5", "python3.13", "cpython-3.13", ">=3.13", "3.13t".
var pyVersion = regexp.MustCompile(`(?:^|[^0-9.])([0-9]+)\.([0-9]+)`)

// shellSeparators end one command on a test.sh line.
var shellSeparators = map[string]bool{";": true, "&&": true, "||": true, "|": true, "&": true, "then": true, "do": true}

// RequestedPython is the Python version (major.minor) tests/test.sh asks uv
// for: the first -p/--python given to uvx or to a uv subcommand (uv run,
// uv tool run, uv venv, uv pip), as Terminal-Bench's `uvx -p 3.13 … pytest`
// does; "" when it asks for none. line is the 1-based line it was found on.
// Harbor's uv downloads that Python; offline, the sealed verifier serves it
// from the toolchain whose Python matches (VerifierBase).
func RequestedPython(script string) (version string, line int) {
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		l := lines[i]
		// A backslash-continued command is one line.
		for strings.HasSuffix(strings.TrimRight(l, " \t\r"), `\`) && i+1 < len(lines) {
			l = strings.TrimSuffix(strings.TrimRight(l, " \t\r"), `\`) + " " + lines[i+1]
			i++
		}
		if v := requestedOnLine(l); v != "" {
			return v, start
		}
	}
	return "", 0
}

// uvValueOptions are uv's options that take the next word as their value
// (the sealed verifier's uv shim skips the same ones).
var uvValueOptions = map[string]bool{}

func init() {
	for _, o := range strings.Fields(`--from -w --with --with-editable --with-requirements -c --constraints
		--overrides --build-constraints -i --index-url --extra-index-url --index --default-index -f
		--find-links -P --upgrade-package --reinstall-package --refresh-package --index-strategy
		--keyring-provider --resolution --prerelease --fork-strategy --exclude-newer
		--exclude-newer-package --no-build-package --no-binary-package --link-mode -C
		--config-setting --config-settings-package --cache-dir --python-platform --env-file
		--color --directory --project --config-file --allow-insecure-host --torch-backend
		--with-executables-from`) {
		uvValueOptions[o] = true
	}
}

// uvSubcommands are the words between uv and its options whose Python is a
// request to run on it.
var uvSubcommands = map[string]bool{"run": true, "tool": true, "venv": true, "pip": true, "install": true, "sync": true}

// requestedOnLine reads one command line: for each uv or uvx command on it,
// its options up to the command it runs (whose own -p, pytest's plugin
// flag, is not uv's).
func requestedOnLine(l string) string {
	for _, sep := range []string{";", "&&", "||", "|", "&", "(", ")", "`"} {
		l = strings.ReplaceAll(l, sep, " ; ")
	}
	f := strings.Fields(l)
	in := false // among a uv or uvx command's options
	for j := 0; j < len(f); j++ {
		tok := strings.Trim(f[j], `"'`)
		if strings.HasPrefix(tok, "#") {
			return ""
		}
		base := tok[strings.LastIndex(tok, "/")+1:]
		switch {
		case shellSeparators[tok]:
			in = false
			continue
		case base == "uvx" || base == "uv":
			in = true
			continue
		case !in:
			continue
		case uvSubcommands[tok]:
			continue
		case uvValueOptions[tok]:
			j++
			continue
		case !strings.HasPrefix(tok, "-"):
			in = false // the command uv runs: the rest is its own
			continue
		}
		var val string
		switch {
		case tok == "-p" || tok == "--python":
			if j+1 < len(f) {
				val = strings.Trim(f[j+1], `"'`)
			}
		case strings.HasPrefix(tok, "--python="):
			val = strings.TrimPrefix(tok, "--python=")
		case strings.HasPrefix(tok, "-p") && !strings.HasPrefix(tok, "--"):
			val = tok[2:]
		default:
			continue
		}
		if m := pyVersion.FindStringSubmatch(val); m != nil {
			return m[1] + "." + m[2]
		}
	}
	return ""
}

// VerifierBase is the base whose sealed verifier toolchain serves a request
// for Python want (RequestedPython): trixie (3.13) for 3.12 and newer,
// bookworm (3.11) for older, as the FROM map reads python:3.x tags. approx,
// when set, says what stands in for want. "" for no request, or one that is
// not Python 3.
func VerifierBase(want string) (base, approx string) {
	major, minor, ok := strings.Cut(want, ".")
	mi, err := strconv.Atoi(minor)
	if !ok || major != "3" || err != nil {
		return "", ""
	}
	base = BaseBookworm
	if mi >= 12 {
		base = BaseTrixie
	}
	if py := BasePython(base); py != want {
		approx = fmt.Sprintf("Python %s (Debian %s's) stands in for %s", py, BaseSuite(base), want)
	}
	return base, approx
}
