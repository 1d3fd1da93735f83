package activities

import (
	"strings"
	"testing"
)

func TestCappedBufferKeepsHeadAndTail(t *testing.T) {
	c := NewCappedBuffer(5, 5)
	for i := 0; i < 10; i++ {
		c.Write([]byte("0123456789"))
	}
	if c.Total() != 100 || c.Dropped() != 90 {
		t.Fatalf("total %d dropped %d", c.Total(), c.Dropped())
	}
	s := c.String()
	if !strings.HasPrefix(s, "01234") || !strings.HasSuffix(s, "56789") || !strings.Contains(s, "90 bytes dropped") {
		t.Fatalf("got %q", s)
	}
	small := NewCappedBuffer(5, 5)
	small.Write([]byte("abc"))
	small.Write([]byte("defgh"))
	if small.String() != "abcdefgh" || small.Dropped() != 0 {
		t.Fatalf("short output must be kept whole, got %q", small.String())
	}
}

func TestParseJUnit(t *testing.T) {
	xml := `<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="test_outputs" name="test_a"/>
<testcase classname="test_outputs" name="test_b"><failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="test_outputs" name="test_c"><skipped message="nope"/></testcase>
</testsuite></testsuites>`
	vr, err := ParseResults(map[string][]byte{"junit.xml": []byte(xml)})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Format != "junit" || vr.Passed != 1 || vr.Total != 3 {
		t.Fatalf("got %+v", vr)
	}
	if vr.Assertions[1].Status != StatusFailed || vr.Assertions[1].Message != "assert 1 == 2" || vr.Assertions[2].Status != StatusSkipped {
		t.Fatalf("statuses wrong: %+v", vr.Assertions)
	}
}

func TestParseCTRFWinsOverOthers(t *testing.T) {
	ctrf := `{"results":{"tests":[{"name":"a","status":"passed"},{"name":"b","status":"failed","message":"m"}]}}`
	vr, err := ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf), "reward.txt": []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Format != "ctrf" || vr.Passed != 1 || vr.Total != 2 {
		t.Fatalf("got %+v", vr)
	}
}

func TestParseRewardFiles(t *testing.T) {
	vr, err := ParseResults(map[string][]byte{"reward.txt": []byte("1.0\n")})
	if err != nil || vr.Passed != 1 || vr.Total != 1 {
		t.Fatalf("reward.txt 1: %+v %v", vr, err)
	}
	vr, err = ParseResults(map[string][]byte{"reward.json": []byte(`{"reward": 0.5}`)})
	if err != nil || vr.Passed != 0 || vr.Total != 1 {
		t.Fatalf("reward.json 0.5: %+v %v", vr, err)
	}
	for name, files := range map[string]map[string][]byte{
		"nothing":       {},
		"not a number":  {"reward.txt": []byte("great")},
		"out of range":  {"reward.txt": []byte("7")},
		"bad json":      {"reward.json": []byte(`{"score": 1}`)},
		"bad xml":       {"junit.xml": []byte(`<testsuite><testcase`)},
		"no assertions": {"junit.xml": []byte(`<testsuite tests="0"></testsuite>`)},
	} {
		if _, err := ParseResults(files); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

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
