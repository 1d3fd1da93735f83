package activities

import (
	"strings"
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

// TestRewardFileDecidesAssertionsCount: Harbor's reward.txt decides the
// reward and resolution; CTRF still gives T1's per-assertion count, and a
// disagreement is recorded.
func TestRewardFileDecidesAssertionsCount(t *testing.T) {
	ctrf := `{"results":{"tests":[{"name":"a","status":"passed"},{"name":"b","status":"failed","message":"m"}]}}`
	vr, err := ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf), "reward.txt": []byte("0.5")})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Format != "ctrf" || vr.Passed != 1 || vr.Total != 2 || vr.Reward == nil || *vr.Reward != 0.5 || vr.RewardFile != "reward.txt" || vr.Resolved {
		t.Fatalf("partial reward.txt beside CTRF: %+v", vr)
	}
	if vr.Disagreement != "" {
		t.Fatalf("both say unresolved, yet: %s", vr.Disagreement)
	}
	vr, _ = ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf), "reward.txt": []byte("1")})
	if !vr.Resolved || !strings.Contains(vr.Disagreement, "reward.txt says reward 1, ctrf says 1 passed, 0 skipped of 2") {
		t.Fatalf("reward 1 over a failing CTRF: resolved %v, disagreement %q", vr.Resolved, vr.Disagreement)
	}
	// reward.json wins over reward.txt, as in Harbor.
	vr, _ = ParseResults(map[string][]byte{"reward.json": []byte(`{"reward": 1}`), "reward.txt": []byte("0")})
	if vr.RewardFile != "reward.json" || !vr.Resolved {
		t.Fatalf("reward.json first: %+v", vr)
	}
}

// TestSkippedTestsResolveAsPytestPasses: skipped tests do not fail a run
// (pytest exits 0, Harbor's test.sh writes 1); they are not passed
// assertions in T1's count.
func TestSkippedTestsResolveAsPytestPasses(t *testing.T) {
	ctrf := `{"results":{"tests":[{"name":"a","status":"passed"},{"name":"b","status":"skipped"}]}}`
	vr, err := ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf)})
	if err != nil || !vr.Resolved || vr.Passed != 1 || vr.Total != 2 || vr.Reward != nil {
		t.Fatalf("skipped test: %+v %v", vr, err)
	}
	vr, _ = ParseResults(map[string][]byte{"ctrf.json": []byte(`{"results":{"tests":[{"name":"b","status":"skipped"}]}}`)})
	if vr.Resolved {
		t.Fatal("only skipped tests resolved the run")
	}
	vr, _ = ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf), "reward.txt": []byte("1")})
	if !vr.Resolved || vr.Disagreement != "" {
		t.Fatalf("skipped test with reward 1: %+v", vr)
	}
}

func TestParseRewardFiles(t *testing.T) {
	vr, err := ParseResults(map[string][]byte{"reward.txt": []byte("1.0\n")})
	if err != nil || vr.Passed != 1 || vr.Total != 1 || !vr.Resolved {
		t.Fatalf("reward.txt 1: %+v %v", vr, err)
	}
	vr, err = ParseResults(map[string][]byte{"reward.json": []byte(`{"reward": 0.5}`)})
	if err != nil || vr.Passed != 0 || vr.Total != 1 || *vr.Reward != 0.5 || vr.Resolved {
		t.Fatalf("reward.json 0.5: %+v %v", vr, err)
	}
	// Any float, as Harbor; a single named value is the reward.
	for body, want := range map[string]float64{`{"accuracy": 0.25}`: 0.25, `3`: 3, `{"reward": -1, "x": 2}`: -1} {
		vr, err = ParseResults(map[string][]byte{"reward.json": []byte(body)})
		if err != nil || *vr.Reward != want {
			t.Errorf("reward.json %s: %+v %v", body, vr, err)
		}
	}
	vr, err = ParseResults(map[string][]byte{"reward.txt": []byte("7")})
	if err != nil || *vr.Reward != 7 || vr.Resolved {
		t.Fatalf("reward.txt 7: %+v %v", vr, err)
	}
	for name, files := range map[string]map[string][]byte{
		"nothing":       {},
		"not a number":  {"reward.txt": []byte("great")},
		"not finite":    {"reward.txt": []byte("inf")},
		"bad json":      {"reward.json": []byte(`{"a": 1, "b": 2}`)},
		"bad xml":       {"junit.xml": []byte(`<testsuite><testcase`)},
		"no assertions": {"junit.xml": []byte(`<testsuite tests="0"></testsuite>`)},
	} {
		if _, err := ParseResults(files); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}
