package sandbox

import (
	"strings"
	"testing"
)

// Every string patch keeps its length (the code that uses the string keeps
// the length elsewhere), and points either nowhere (/proc/0, which never
// exists) or into the read-only toolchain.
func TestToolchainStringPatchesKeepLengthsAndPointNowhere(t *testing.T) {
	for _, p := range toolchainStringPatches {
		if len(p.Old) != len(p.New) || p.Old == p.New {
			t.Errorf("%s: %q -> %q: lengths %d, %d", p.File, p.Old, p.New, len(p.Old), len(p.New))
		}
		if strings.HasSuffix(p.Old, "\x00") != strings.HasSuffix(p.New, "\x00") {
			t.Errorf("%s: %q -> %q: an exact match must stay NUL-terminated", p.File, p.Old, p.New)
		}
		switch n := strings.TrimRight(p.New, "\x00"); {
		case strings.HasPrefix(n, "/proc/0/"), strings.HasPrefix(n, ToolchainMount+"/"):
		case strings.HasPrefix(p.Old, "OPENSSL_") && strings.HasPrefix(n, "T1FLOW_"):
			if !toolchainDropVar(n + "=/app/x") {
				t.Errorf("%s: the verifier's environment keeps %s from the image", p.File, n)
			}
		default:
			t.Errorf("%s: %q -> %q points somewhere the agent may write", p.File, p.Old, p.New)
		}
	}
	for _, n := range []int{8, 13, 40} {
		if s := toolchainNowhere(n); len(s) != n || !strings.HasPrefix(s, "/proc/0/") {
			t.Errorf("toolchainNowhere(%d) = %q", n, s)
		}
	}
}

// The recipe hash covers the string patches: changing one rebuilds.
func TestToolchainHashCoversStringPatches(t *testing.T) {
	before := ToolchainHash("t1flow-base:x")
	saved := toolchainStringPatches[0]
	defer func() { toolchainStringPatches[0] = saved }()
	toolchainStringPatches[0].New = toolchainNowhere(len(saved.New)-1) + "\x00"
	toolchainStringPatches[0].New = strings.Replace(toolchainStringPatches[0].New, "t1flow", "T1FLOW", 1)
	if ToolchainHash("t1flow-base:x") == before {
		t.Error("the hash does not follow toolchainStringPatches")
	}
}
