package sandbox

import (
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
)

func TestRewriteFrom(t *testing.T) {
	d := &Docker{Aliases: map[string]string{"ubuntu:*": "@base", "python:*": "@python-trixie", "python:3.11-slim": "local/py:1"}}
	in := "FROM ubuntu:22.04 AS build\nRUN make\nFROM --platform=linux/amd64 python:3.11-slim\nCOPY --from=build /x /x\nFROM build\nFROM python:3.13\nFROM alpine:3\n"
	out, used, bases, err := d.RewriteFrom(in)
	if err != nil {
		t.Fatal(err)
	}
	bw, py := BaseTag(task.BaseBookworm), BaseTag(task.BasePythonTrixie)
	want := "FROM " + bw + " AS build\nRUN make\nFROM --platform=linux/amd64 local/py:1\nCOPY --from=build /x /x\nFROM build\nFROM " + py + "\nFROM alpine:3\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if strings.Join(used, ",") != bw+",local/py:1,"+py+",alpine:3" || strings.Join(bases, ",") != "bookworm,python-trixie" {
		t.Fatalf("used %v bases %v", used, bases)
	}
	d.Aliases["ubuntu:*"] = "@alpine"
	if _, _, _, err := d.RewriteFrom(in); err == nil || !strings.Contains(err.Error(), "@alpine names no base") {
		t.Fatalf("an alias to an unknown base: %v", err)
	}
}

// TestDefaultAliasesFollowTheFromLine: the default map picks the base whose
// Debian and Python are the FROM line's, or the nearest.
func TestDefaultAliasesFollowTheFromLine(t *testing.T) {
	d := &Docker{Aliases: DefaultAliases}
	for img, want := range map[string]string{
		"python:3.13-slim-bookworm": task.BasePythonTrixie, // Python 3.13 outweighs the suite
		"python:3.13":               task.BasePythonTrixie,
		"python:3.11-slim":          task.BasePythonBookworm,
		"python:3.12-slim":          task.BasePythonTrixie,
		"python:3.10":               task.BasePythonBookworm,
		"python:3":                  task.BasePythonTrixie,
		"debian:13-slim":            task.BaseTrixie,
		"debian:trixie":             task.BaseTrixie,
		"debian:bookworm-slim":      task.BaseBookworm,
		"debian:12":                 task.BaseBookworm,
		"ubuntu:22.04":              task.BaseBookworm,
		"ubuntu:24.04":              task.BaseTrixie,
	} {
		if got := d.alias(img); got != "@"+want {
			t.Errorf("FROM %s -> %s, want @%s", img, got, want)
		}
	}
	if got := d.alias("ghcr.io/x/y:1"); got != "ghcr.io/x/y:1" {
		t.Errorf("an unknown image is mapped to %s", got)
	}
}

func TestBaseImageTagFollowsRecipe(t *testing.T) {
	a, tr, py := BaseImageTag(), BaseTag(task.BaseTrixie), BaseTag(task.BasePythonTrixie)
	if a == tr || tr == py || !strings.HasPrefix(py, "t1flow-base:") || !strings.HasSuffix(py, "-trixie-python") {
		t.Fatalf("tags %s %s %s are not one per base", a, tr, py)
	}
	BasePackages = append(BasePackages, "extra-package")
	defer func() { BasePackages = BasePackages[:len(BasePackages)-1] }()
	if BaseImageTag() == a || BaseTag(task.BasePythonTrixie) == py || !strings.HasPrefix(a, "t1flow-base:") {
		t.Fatalf("tag %s does not follow the recipe", a)
	}
}
