package activities

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/t1flow/t1flow/internal/text"
)

// VerifierDir is where tests/test.sh writes its results.
const VerifierDir = "/logs/verifier"

// ParseResults reads the verifier's result files as Harbor does, plus T1's
// per-assertion count. The reward is Harbor's: reward.json, else reward.txt
// (any finite number). CTRF JSON, else JUnit XML, gives the assertions T1's
// reward counts (passing / S). Resolved is a reward of 1, or, for a task that
// writes no reward file, every assertion passed or skipped with at least one
// passed (pytest's exit 0, which is what test.sh turns into reward 1). When
// both exist and disagree, Disagreement says how; the reward file decides.
func ParseResults(files map[string][]byte) (VerifyResult, error) {
	rewards, reward, rewardFile, err := harborReward(files)
	if err != nil {
		return VerifyResult{}, err
	}
	format, as, err := assertions(files)
	if err != nil {
		return VerifyResult{}, err
	}
	if format == "" {
		if rewards == nil {
			return VerifyResult{}, fmt.Errorf("no results in %s (expected reward.json, reward.txt, ctrf.json or a JUnit *.xml)", VerifierDir)
		}
		// T1's count for a task that reports no tests: one assertion, the
		// reward (one per named reward when there is no single one), passed
		// at 1.
		format = rewardFile
		counted := rewards
		if reward != nil {
			counted = map[string]float64{"reward": *reward}
		}
		for _, k := range sortedRewardKeys(counted) {
			st := StatusFailed
			if counted[k] == 1 {
				st = StatusPassed
			}
			name := rewardFile
			if len(counted) > 1 {
				name = rewardFile + ":" + k
			}
			as = append(as, Assertion{Name: name, Status: st, Message: fmt.Sprintf("%s %v", k, counted[k])})
		}
	}
	vr, err := tally(format, as)
	if err != nil {
		return vr, err
	}
	testsPass := vr.HarborResolved()
	vr.Rewards, vr.Reward, vr.RewardFile = rewards, reward, rewardFile
	vr.Resolved = vr.HarborResolved()
	if rewards != nil && format != rewardFile && vr.Resolved != testsPass {
		vr.Disagreement = fmt.Sprintf("%s says %s, %s says %d passed, %d skipped of %d: the reward file decides", rewardFile, rewardsText(rewards), format, vr.Passed, vr.skipped(), vr.Total)
	}
	return vr, nil
}

// HarborResolved is Harbor's success: a reward of 1, or, with no reward
// file, at least one assertion passed and every other one skipped (pytest
// exits 0, which test.sh turns into reward 1). Results without per-assertion
// statuses count no skips.
func (vr VerifyResult) HarborResolved() bool {
	if vr.Reward != nil {
		return *vr.Reward == 1
	}
	if len(vr.Rewards) > 0 {
		// Several named rewards and no "reward": resolved when every one is 1.
		//workflowcheck:ignore a conjunction: the same answer in any order
		for _, v := range vr.Rewards {
			if v != 1 {
				return false
			}
		}
		return true
	}
	return vr.Passed > 0 && vr.Passed+vr.skipped() == vr.Total
}

func (vr VerifyResult) skipped() int {
	n := 0
	for _, a := range vr.Assertions {
		if a.Status == StatusSkipped {
			n++
		}
	}
	return n
}

// harborReward is Harbor's reward: reward.json (a dict of named numbers, or
// a bare number as {"reward": x}), else reward.txt ({"reward": x}). reward is
// the dict's "reward", else its only value; nil for several values without
// a "reward" (Harbor then reports a mean per key).
func harborReward(files map[string][]byte) (rewards map[string]float64, reward *float64, file string, err error) {
	if b, ok := files["reward.json"]; ok {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, nil, "", fmt.Errorf("%s/reward.json: %v", VerifierDir, err)
		}
		m, isMap := v.(map[string]any)
		if !isMap {
			m = map[string]any{"reward": v}
		}
		if len(m) == 0 {
			return nil, nil, "", fmt.Errorf("%s/reward.json: no rewards in {} (expected {\"reward\": number} or named numbers)", VerifierDir)
		}
		rewards = make(map[string]float64, len(m))
		for k, x := range m {
			f, ok := x.(float64)
			if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, nil, "", fmt.Errorf("%s/reward.json: %q is %s, not a finite number", VerifierDir, k, text.Truncate(fmt.Sprint(x), 40))
			}
			rewards[k] = f
		}
		if f, ok := rewards["reward"]; ok {
			reward = &f
		} else if len(rewards) == 1 {
			for _, f := range rewards {
				reward = &f
			}
		}
		return rewards, reward, "reward.json", nil
	}
	if b, ok := files["reward.txt"]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, nil, "", fmt.Errorf("%s/reward.txt: %q is not a number", VerifierDir, strings.TrimSpace(string(b)))
		}
		return map[string]float64{"reward": f}, &f, "reward.txt", nil
	}
	return nil, nil, "", nil
}

func sortedRewardKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rewardsText is "reward 0.5" for a single reward, else "a 1, b 0.5".
func rewardsText(m map[string]float64) string {
	parts := []string{}
	for _, k := range sortedRewardKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// assertions reads CTRF JSON, else every JUnit XML file; format "" when
// there is neither.
func assertions(files map[string][]byte) (string, []Assertion, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "ctrf.json" || strings.HasSuffix(n, ".ctrf.json") || strings.HasPrefix(path.Base(n), "ctrf") && strings.HasSuffix(n, ".json") {
			as, err := parseCTRF(files[n])
			if err != nil {
				return "", nil, fmt.Errorf("%s/%s: %v", VerifierDir, n, err)
			}
			return "ctrf", as, nil
		}
	}
	var junit []Assertion
	found := false
	for _, n := range names {
		if strings.HasSuffix(n, ".xml") {
			as, err := parseJUnit(files[n])
			if err != nil {
				return "", nil, fmt.Errorf("%s/%s: %v", VerifierDir, n, err)
			}
			junit = append(junit, as...)
			found = true
		}
	}
	if found {
		return "junit", junit, nil
	}
	return "", nil, nil
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
