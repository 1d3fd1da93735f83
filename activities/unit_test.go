package activities

import (
	"testing"
)

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
