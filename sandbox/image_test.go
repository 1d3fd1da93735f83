package sandbox

import (
	"strings"
	"testing"
)

func TestRewriteFrom(t *testing.T) {
	d := &Docker{Aliases: map[string]string{"ubuntu:*": "@base", "python:*": "@base", "python:3.11-slim": "local/py:1"}}
	in := "FROM ubuntu:22.04 AS build\nRUN make\nFROM --platform=linux/amd64 python:3.11-slim\nCOPY --from=build /x /x\nFROM build\nFROM alpine:3\n"
	out, used, err := d.RewriteFrom(in, "t1flow-base:abc")
	if err != nil {
		t.Fatal(err)
	}
	want := "FROM t1flow-base:abc AS build\nRUN make\nFROM --platform=linux/amd64 local/py:1\nCOPY --from=build /x /x\nFROM build\nFROM alpine:3\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if strings.Join(used, ",") != "t1flow-base:abc,local/py:1,alpine:3" {
		t.Fatalf("used %v", used)
	}
}

func TestBaseImageTagFollowsRecipe(t *testing.T) {
	a := BaseImageTag()
	BasePackages = append(BasePackages, "extra-package")
	defer func() { BasePackages = BasePackages[:len(BasePackages)-1] }()
	if BaseImageTag() == a || !strings.HasPrefix(a, "t1flow-base:") {
		t.Fatalf("tag %s does not follow the recipe", a)
	}
}
