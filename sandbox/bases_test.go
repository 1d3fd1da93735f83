package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// writeImageTask is a task whose Dockerfile is the image check: a build that
// passes proves the FROM line's base has what the RUN lines use.
func writeImageTask(t *testing.T, name, dockerfile string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for rel, body := range map[string]string{
		task.InstructionFile: "Nothing to do.\n",
		task.ConfigFile:      "version = \"1.0\"\n",
		task.DockerfileFile:  dockerfile,
		task.SolutionFile:    "#!/bin/bash\ntrue\n",
		task.TestScriptFile:  "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPythonBasesAreLikeTheOfficialImages: FROM python:3.13-slim-bookworm
// gets Python 3.13 (Debian trixie's), pip, the python command and no
// EXTERNALLY-MANAGED marker, so `pip install` works as in the official
// image; python:3.11 gets bookworm's 3.11; debian:13 is trixie, with the
// marker kept. On every base a user other than root can run programs (/ is
// 0755, as in Debian's images), as a task's USER line or agent.user needs.
func TestPythonBasesAreLikeTheOfficialImages(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	for name, df := range map[string]string{
		"py313": "FROM python:3.13-slim-bookworm\n" +
			"RUN python -c 'import sys; assert sys.version_info[:2] == (3, 13), sys.version'\n" +
			"RUN pip --version && ! ls /usr/lib/python3*/EXTERNALLY-MANAGED\n" +
			// copy.replace is new in Python 3.13.
			"RUN python -c 'import copy, dataclasses; copy.replace'\n",
		"py311": "FROM python:3.11-slim\n" +
			"RUN python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' && pip --version && python -m venv /tmp/v\n",
		"deb13": "FROM debian:13-slim\n" +
			"RUN grep -q 'VERSION_CODENAME=trixie' /etc/os-release && ls /usr/lib/python3.13/EXTERNALLY-MANAGED\n",
	} {
		df += "USER nobody\nRUN test \"$(stat -c %a /)\" = 755 && test \"$(id -un)\" = nobody && python3 -c pass\n"
		tk, err := task.Load(writeImageTask(t, name, df))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.EnsureTaskImage(ctx, tk, func(l string) { t.Log(l) }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDockerImageWithoutDockerfile: Harbor's docker_image makes the
// Dockerfile optional; offline the image goes through the base map.
func TestDockerImageWithoutDockerfile(t *testing.T) {
	d := testenv.Docker(t)
	dir := writeImageTask(t, "img-only", "FROM scratch\n")
	os.RemoveAll(filepath.Join(dir, "environment"))
	os.WriteFile(filepath.Join(dir, task.ConfigFile), []byte("[environment]\ndocker_image = \"python:3.13-slim\"\n"), 0o644)
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(context.Background(), tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img, "t1flow-task:") {
		t.Fatalf("image %s", img)
	}
}

// TestTrixieTasksGetPython313Toolchain: a sandbox of an image built FROM
// python:3.13 (the trixie python base) gets the trixie toolchain, whose
// sealed Python is 3.13 and runs 3.13-only code (PEP 696 type parameter
// defaults, copy.replace); a python:3.11 image keeps bookworm's 3.11. A
// test.sh that asks uv for a Python (`uvx -p 3.13`, which Harbor's uv
// downloads whatever the image) gets the toolchain with that Python on
// either image.
func TestTrixieTasksGetPython313Toolchain(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	for _, c := range []struct{ from, uvx, want string }{
		{"python:3.13-slim-bookworm", "", "3.13"},
		{"python:3.11-slim", "", "3.11"},
		{"python:3.11-slim", "uvx -p 3.13 --with pytest==8.4.1 pytest -p no:cacheprovider", "3.13"},
		{"python:3.13-slim", "uvx --python=3.11 pytest", "3.11"},
	} {
		name := c.from + " " + c.uvx
		dir := writeImageTask(t, strings.NewReplacer(":", "-", ".", "", " ", "", "=", "").Replace(c.from+c.uvx), "FROM "+c.from+"\n")
		if c.uvx != "" {
			os.WriteFile(filepath.Join(dir, task.TestScriptFile), []byte("#!/bin/bash\n"+c.uvx+" /tests\n"), 0o755)
		}
		tk, err := task.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		img, _, err := d.EnsureTaskImage(ctx, tk, func(l string) { t.Log(l) })
		if err != nil {
			t.Fatal(err)
		}
		lim := sandbox.Limits{CPUs: 1, MemoryMB: 512, Pids: 256, VerifierPython: tk.Config.VerifierPython}
		tc, err := d.SandboxToolchain(ctx, img, lim.VerifierPython)
		if err != nil || tc == nil {
			t.Fatalf("%s: toolchain %v, %v", name, tc, err)
		}
		t.Logf("%s: toolchain %s (built %v in %s)", name, tc.Hash, tc.Built, tc.BuildTime)
		id, err := d.Start(ctx, "t1flow-tctest-"+strings.NewReplacer(":", "-", ".", "", " ", "", "=", "").Replace(c.from+c.uvx), img, lim, nil, map[string]string{sandbox.LabelRollout: "tctest"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Remove(context.Background(), id) })
		code := "import sys, copy, dataclasses\n" +
			"print('%d.%d' % sys.version_info[:2])\n"
		if c.want == "3.13" {
			code += "exec('class Box[T = int]: pass')\n" +
				"@dataclasses.dataclass\nclass P:\n    x: int\nassert copy.replace(P(1), x=2).x == 2\n"
		}
		argv := []string{sandbox.ToolchainMount + "/bin/env", "-i", "PATH=" + sandbox.ToolchainMount + "/bin", sandbox.ToolchainMount + "/bin/python3", "-I", "-c", code}
		res, err := d.ExecArgv(ctx, id, argv, sandbox.ExecOptions{Env: sandbox.ToolchainExecEnv})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(res.Output); res.ExitCode != 0 || got != c.want {
			t.Errorf("%s: the sealed Python said %q (exit %d), want %s", name, got, res.ExitCode, c.want)
		}
	}
}
