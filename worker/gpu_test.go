package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestGPUFlagsModel(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		g          gpuFlags
		want, fail string
	}{
		{gpuFlags{backend: "reference", init: "random"}, "random", ""},
		{gpuFlags{backend: "reference", init: "/ck"}, "/ck", ""},
		{gpuFlags{backend: "hf", init: "random"}, "", "-gpu-backend hf needs -model DIR"},
		{gpuFlags{backend: "hf", init: "random", model: dir}, dir, ""},
		{gpuFlags{backend: "hf", init: dir, model: dir}, dir, ""},
		{gpuFlags{backend: "hf", init: "/other", model: dir}, "", "name different models"},
		{gpuFlags{backend: "reference", init: "random", model: "rel"}, "", ""},
	} {
		got, err := c.g.initDir()
		switch {
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("%+v: %v, want %q", c.g, err, c.fail)
		case c.fail == "" && err != nil:
			t.Errorf("%+v: %v", c.g, err)
		case c.want != "" && got != c.want:
			t.Errorf("%+v: %q, want %q", c.g, got, c.want)
		case c.g.model == "rel" && !filepath.IsAbs(got):
			t.Errorf("-model rel: %q is not absolute (the processes run elsewhere)", got)
		}
	}
}
