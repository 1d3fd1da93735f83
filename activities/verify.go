package activities

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/t1flow/t1flow/internal/text"
)

// VerifierDir is where tests/test.sh writes its results.
const VerifierDir = "/logs/verifier"

// ParseResults turns the verifier's result files into assertions. Preference:
// CTRF JSON, then JUnit XML, then Harbor's reward.json or reward.txt (one
// assertion, passed only at reward 1).
func ParseResults(files map[string][]byte) (VerifyResult, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "ctrf.json" || strings.HasSuffix(n, ".ctrf.json") || strings.HasPrefix(path.Base(n), "ctrf") && strings.HasSuffix(n, ".json") {
			as, err := parseCTRF(files[n])
			if err != nil {
				return VerifyResult{}, fmt.Errorf("%s/%s: %v", VerifierDir, n, err)
			}
			return tally("ctrf", as)
		}
	}
	var junit []Assertion
	found := false
	for _, n := range names {
		if strings.HasSuffix(n, ".xml") {
			as, err := parseJUnit(files[n])
			if err != nil {
				return VerifyResult{}, fmt.Errorf("%s/%s: %v", VerifierDir, n, err)
			}
			junit = append(junit, as...)
			found = true
		}
	}
	if found {
		return tally("junit", junit)
	}
	if b, ok := files["reward.json"]; ok {
		var v struct {
			Reward *float64 `json:"reward"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.Reward == nil {
			return VerifyResult{}, fmt.Errorf("%s/reward.json: expected {\"reward\": number}", VerifierDir)
		}
		return rewardAssertion("reward.json", *v.Reward)
	}
	if b, ok := files["reward.txt"]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			return VerifyResult{}, fmt.Errorf("%s/reward.txt: %q is not a number", VerifierDir, strings.TrimSpace(string(b)))
		}
		return rewardAssertion("reward.txt", f)
	}
	return VerifyResult{}, fmt.Errorf("no results in %s (expected ctrf.json, a JUnit *.xml, reward.json or reward.txt)", VerifierDir)
}

func rewardAssertion(format string, r float64) (VerifyResult, error) {
	if r < 0 || r > 1 {
		return VerifyResult{}, fmt.Errorf("%s/%s: reward %v is outside [0, 1]", VerifierDir, format, r)
	}
	st := StatusFailed
	if r == 1 {
		st = StatusPassed
	}
	return tally(format, []Assertion{{Name: format, Status: st, Message: fmt.Sprintf("reward %v", r)}})
}

func tally(format string, as []Assertion) (VerifyResult, error) {
	if len(as) == 0 {
		return VerifyResult{}, errors.New("the results hold no assertion")
	}
	vr := VerifyResult{Format: format, Assertions: as, Total: len(as)}
	for _, a := range as {
		if a.Status == StatusPassed {
			vr.Passed++
		}
	}
	return vr, nil
}

func parseCTRF(b []byte) ([]Assertion, error) {
	var doc struct {
		Results *struct {
			Tests []struct {
				Name    string `json:"name"`
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"tests"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if doc.Results == nil {
		return nil, errors.New("no results.tests")
	}
	var out []Assertion
	for _, t := range doc.Results.Tests {
		st := StatusFailed
		switch t.Status {
		case "passed":
			st = StatusPassed
		case "skipped", "pending":
			st = StatusSkipped
		}
		out = append(out, Assertion{Name: t.Name, Status: st, Message: text.Truncate(t.Message, 300)})
	}
	return out, nil
}

type junitCase struct {
	Name      string    `xml:"name,attr"`
	Classname string    `xml:"classname,attr"`
	Failure   *junitMsg `xml:"failure"`
	Error     *junitMsg `xml:"error"`
	Skipped   *junitMsg `xml:"skipped"`
}

type junitMsg struct {
	Message string `xml:"message,attr"`
}

type junitSuite struct {
	Cases  []junitCase  `xml:"testcase"`
	Suites []junitSuite `xml:"testsuite"`
}

func parseJUnit(b []byte) ([]Assertion, error) {
	// The root is <testsuites> or <testsuite>; both nest the same way.
	var root junitSuite
	if err := xml.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	var out []Assertion
	var walk func(s junitSuite)
	walk = func(s junitSuite) {
		for _, c := range s.Cases {
			a := Assertion{Name: c.Name, Status: StatusPassed}
			if c.Classname != "" {
				a.Name = c.Classname + "::" + c.Name
			}
			switch {
			case c.Failure != nil:
				a.Status, a.Message = StatusFailed, c.Failure.Message
			case c.Error != nil:
				a.Status, a.Message = StatusFailed, c.Error.Message
			case c.Skipped != nil:
				a.Status, a.Message = StatusSkipped, c.Skipped.Message
			}
			a.Message = text.Truncate(a.Message, 300)
			out = append(out, a)
		}
		for _, sub := range s.Suites {
			walk(sub)
		}
	}
	walk(root)
	return out, nil
}
