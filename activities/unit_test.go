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

// TestSeveralNamedRewards: a reward.json of several named numbers and no
// "reward" is Harbor's rewards dict (it reports a mean per key): kept whole,
// no single reward, resolved when every one is 1, and without tests T1
// counts one assertion per key.
func TestSeveralNamedRewards(t *testing.T) {
	vr, err := ParseResults(map[string][]byte{"reward.json": []byte(`{"correctness": 1, "style": 0.5}`)})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Reward != nil || len(vr.Rewards) != 2 || vr.Rewards["correctness"] != 1 || vr.Rewards["style"] != 0.5 {
		t.Fatalf("rewards %v reward %v, want both kept and no single reward", vr.Rewards, vr.Reward)
	}
	if vr.Resolved || vr.Format != "reward.json" || vr.Passed != 1 || vr.Total != 2 || vr.Assertions[0].Name != "reward.json:correctness" {
		t.Fatalf("style 0.5 resolved %v, %d/%d %+v; want unresolved, 1/2 by key", vr.Resolved, vr.Passed, vr.Total, vr.Assertions)
	}
	vr, _ = ParseResults(map[string][]byte{"reward.json": []byte(`{"correctness": 1, "style": 1}`)})
	if !vr.Resolved || vr.Passed != 2 {
		t.Fatalf("every named reward 1: %+v", vr)
	}
	// A "reward" among them is the reward; the others are kept beside it.
	vr, _ = ParseResults(map[string][]byte{"reward.json": []byte(`{"reward": 1, "style": 0}`)})
	if vr.Reward == nil || *vr.Reward != 1 || !vr.Resolved || vr.Total != 1 || vr.Rewards["style"] != 0 {
		t.Fatalf("reward beside style: %+v", vr)
	}
	// Beside CTRF the assertions count; the rewards decide resolution.
	ctrf := `{"results":{"tests":[{"name":"a","status":"passed"},{"name":"b","status":"passed"}]}}`
	vr, _ = ParseResults(map[string][]byte{"ctrf.json": []byte(ctrf), "reward.json": []byte(`{"a": 1, "b": 0}`)})
	if vr.Resolved || vr.Passed != 2 || !strings.Contains(vr.Disagreement, "reward.json says a 1, b 0, ctrf says 2 passed") {
		t.Fatalf("named rewards beside a passing CTRF: resolved %v, disagreement %q", vr.Resolved, vr.Disagreement)
	}
	_, err = ParseResults(map[string][]byte{"reward.json": []byte(`{"a": 1, "b": "high"}`)})
	if err == nil || !strings.Contains(err.Error(), `reward.json: "b" is high`) {
		t.Fatalf("a non-number among named rewards: %v, want the key named", err)
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
		"bad json":      {"reward.json": []byte(`{"a": 1,`)},
		"string value":  {"reward.json": []byte(`{"reward": "1"}`)},
		"null value":    {"reward.json": []byte(`{"a": 1, "b": null}`)},
		"empty dict":    {"reward.json": []byte(`{}`)},
		"bad xml":       {"junit.xml": []byte(`<testsuite><testcase`)},
		"no assertions": {"junit.xml": []byte(`<testsuite tests="0"></testsuite>`)},
	} {
		if _, err := ParseResults(files); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}
