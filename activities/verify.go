package activities

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/text"
	"github.com/t1flow/t1flow/sandbox"
)

// VerifierDir is where tests/test.sh writes its results.
const VerifierDir = "/logs/verifier"

// prepareVerifier stops every process left from the agent phase (so nothing
// the agent started can write results during verification), then removes
// whatever the agent put where tests and results go. It runs as a plain bash
// (not under timeout), so kill -9 -1 spares only it and PID 1.
const prepareVerifier = `kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; ` +
	`rm -rf /tests ` + VerifierDir + ` && mkdir -p ` + VerifierDir + ` /tests`

// Verify copies the held-out tests into the sandbox after the agent phase,
// runs tests/test.sh under the verifier timeout, and reads per-assertion
// outcomes. A verifier that crashes, times out or writes nothing is a
// VerifierError, never a reward of 0.
func (a *Activities) Verify(ctx context.Context, in VerifyInput) (VerifyResult, error) {
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return VerifyResult{}, err
	}
	id := in.Sandbox.ContainerID
	if _, err := a.Docker.ExecRaw(ctx, id, prepareVerifier, "root"); err != nil {
		return VerifyResult{}, sandboxErr(err, "prepare verifier in %s", in.Sandbox.Name)
	}
	tests, err := task.TarBytes(t.Dir, "tests", "tests/")
	if err != nil {
		return VerifyResult{}, errs.TaskInvalidf("%s/tests: %v", t.Dir, err)
	}
	if err := a.Docker.CopyIn(ctx, id, "/", tests); err != nil {
		return VerifyResult{}, sandboxErr(err, "copy tests into %s", in.Sandbox.Name)
	}
	timeout := in.TimeoutSec
	if timeout <= 0 {
		timeout = t.Config.VerifierTimeoutSec
	}
	var env []string
	for k, v := range t.Config.VerifierEnv {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	er, err := a.Docker.Exec(ctx, id, "bash /tests/test.sh", sandbox.ExecOptions{
		Timeout:  time.Duration(timeout * float64(time.Second)),
		User:     "root",
		Env:      env,
		HeadCap:  4 << 10,
		TailCap:  4 << 10,
		Progress: func() { heartbeat.Record(ctx, "verifying") },
	})
	if err != nil {
		return VerifyResult{}, sandboxErr(err, "run tests/test.sh in %s", in.Sandbox.Name)
	}
	preview := er.Output
	if len(preview) > 2*PreviewBytes {
		preview = preview[len(preview)-2*PreviewBytes:]
	}
	if er.TimedOut {
		return VerifyResult{}, errs.Verifierf("tests/test.sh timed out after %.0fs (verifier.timeout_sec); output tail:\n%s", timeout, preview)
	}
	results, err := a.Docker.CopyOut(ctx, id, VerifierDir)
	if err != nil {
		return VerifyResult{}, sandboxErr(err, "read %s from %s", VerifierDir, in.Sandbox.Name)
	}
	files, err := sandbox.UntarFiles(results, 4<<20)
	if err != nil {
		return VerifyResult{}, errs.Verifierf("read %s: %v", VerifierDir, err)
	}
	vr, err := ParseResults(files)
	if err != nil {
		return VerifyResult{}, errs.Verifierf("tests/test.sh exited %d: %v; output tail:\n%s", er.ExitCode, err, preview)
	}
	vr.ExitCode = er.ExitCode
	vr.DurationMs = er.Duration.Milliseconds()
	vr.Preview = preview
	return vr, nil
}

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
