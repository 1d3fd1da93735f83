package activities

import (
	"fmt"
	"sort"

	"github.com/t1flow/t1flow/sandbox"
)

// RunnerDisagrees holds the results test.sh left against what the runner
// itself reported over its channel (sandbox.ParseRunnerChannelKeyed), and
// returns why they cannot be believed:
//
//   - evidence the guard or the plugin reported (the agent's code writing the
//     results, reaching the interpreter through ctypes or gc, replacing the
//     runner's functions, sys.modules or builtins), and lines on the channel
//     no runner wrote (ParseRunnerChannelKeyed);
//   - results that resolve the task (a reward of 1, or every test in the
//     CTRF or JUnit passed or skipped) when the runner did not: a session
//     that never finished or exited other than 0, or a test it saw fail,
//     whether the results show that test failed, passed or not at all;
//   - a pass in a CTRF or JUnit file that the runner did not see;
//   - a pass claimed while a session never finished (what it would have
//     reported is unknown).
//
// A run with no pytest session on the channel (test.sh ran no sealed
// pytest) is not compared. Each finding makes the rollout tampered.
func RunnerDisagrees(vr VerifyResult, ch sandbox.RunnerChannel) []sandbox.TamperFinding {
	out := append([]sandbox.TamperFinding{}, ch.Evidence...)
	resolved := vr.Resolved || vr.HarborResolved()
	if ch.Sessions == 0 || vr.Passed == 0 && !resolved {
		return out
	}
	file := VerifierDir + "/" + vr.Format
	disagree := func(format string, args ...any) {
		out = append(out, sandbox.TamperFinding{Path: file, Kind: "disagrees", Reason: fmt.Sprintf(format, args...)})
	}
	if ch.Overflow {
		disagree("the runner's channel overflowed (%d bytes, %d kept): it corroborates no pass", ch.Bytes, MaxChannelBytes)
		return out
	}
	if why := ch.Unresolved(); resolved && why != "" {
		disagree("the results resolve the task (%s), but %s", resolvedBy(vr), why)
	} else if n := ch.Unfinished(); n > 0 {
		disagree("%d passed in the results, but %d of the runner's %d pytest sessions never finished", vr.Passed, n, ch.Sessions)
	}
	switch vr.Format {
	case "ctrf", "junit":
		claimed := map[string]int{}
		for _, a := range vr.Assertions {
			if a.Status == StatusPassed {
				claimed[a.Name]++
			}
		}
		seen := ch.PassedAs(vr.Format)
		names := make([]string, 0, len(claimed))
		for n := range claimed {
			names = append(names, n)
		}
		sort.Strings(names)
		unseen := 0
		for _, n := range names {
			if claimed[n] <= seen[n] {
				continue
			}
			if unseen++; unseen <= maxUnseenFindings {
				disagree("%s: %d passed in the results, the runner saw %d pass", n, claimed[n], seen[n])
			}
		}
		if unseen > maxUnseenFindings {
			disagree("and %d more tests passed in the results that the runner did not see pass", unseen-maxUnseenFindings)
		}
	}
	return out
}

// maxUnseenFindings caps the findings that name a pass the runner did not
// see; one more says how many others there were.
const maxUnseenFindings = 10

// resolvedBy says what in vr resolves the task.
func resolvedBy(vr VerifyResult) string {
	if vr.Rewards != nil {
		return vr.RewardFile + " " + rewardsText(vr.Rewards)
	}
	if vr.Format == "reward.txt" || vr.Format == "reward.json" {
		return vr.Format + " 1"
	}
	return fmt.Sprintf("%d passed, %d skipped of %d", vr.Passed, vr.skipped(), vr.Total)
}

// RunnerReconcile counts, in CTRF or JUnit results, the tests the runner saw
// fail that the results leave out: each is added as a failed assertion, so
// Total is at least what the runner ran and failed, and results that drop
// a failure cannot resolve the task. Resolved follows (HarborResolved, and
// never when the runner did not resolve it). Results with no runner
// session, or from a channel that overflowed, are left as they are.
func RunnerReconcile(vr *VerifyResult, ch sandbox.RunnerChannel) {
	if ch.Sessions == 0 || ch.Overflow || vr.Format != "ctrf" && vr.Format != "junit" {
		return
	}
	have := map[string]bool{}
	for _, a := range vr.Assertions {
		have[a.Name] = true
	}
	for _, n := range ch.FailedAs(vr.Format) {
		if have[n] {
			continue
		}
		have[n] = true
		vr.Assertions = append(vr.Assertions, Assertion{Name: n, Status: StatusFailed,
			Message: "the runner saw it fail; " + VerifierDir + "/" + vr.Format + " leaves it out"})
	}
	vr.Total = len(vr.Assertions)
	vr.Resolved = vr.HarborResolved() && ch.Unresolved() == ""
}
