package activities

import (
	"fmt"
	"sort"

	"github.com/t1flow/t1flow/sandbox"
)

// RunnerDisagrees holds the results test.sh left against what the runner
// itself reported over its channel (sandbox.ParseRunnerChannel), and returns
// why they cannot be believed: evidence the guard or the plugin reported
// (the agent's code writing the results, reaching the interpreter through
// ctypes or gc, replacing the runner's functions, sys.modules or builtins),
// and any pass in the result files the runner did not see. A run with no
// pytest session on the channel (test.sh ran no sealed pytest) is not
// compared. Each finding makes the rollout tampered.
func RunnerDisagrees(vr VerifyResult, ch sandbox.RunnerChannel) []sandbox.TamperFinding {
	out := append([]sandbox.TamperFinding{}, ch.Evidence...)
	if ch.Sessions == 0 || vr.Passed == 0 {
		return out
	}
	file := VerifierDir + "/" + vr.Format
	if ch.Overflow {
		return append(out, sandbox.TamperFinding{Path: file, Kind: "disagrees",
			Reason: fmt.Sprintf("the runner's channel overflowed (%d bytes, %d kept): it corroborates no pass", ch.Bytes, MaxChannelBytes)})
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
		for _, n := range names {
			if claimed[n] > seen[n] {
				out = append(out, sandbox.TamperFinding{Path: file, Kind: "disagrees",
					Reason: fmt.Sprintf("%s: %d passed in the results, the runner saw %d pass", n, claimed[n], seen[n])})
			}
		}
	default: // reward.txt, reward.json: 1 only if every session exited 0
		ok := len(ch.ExitStatuses) == ch.Sessions
		for _, s := range ch.ExitStatuses {
			ok = ok && s == 0
		}
		if !ok {
			out = append(out, sandbox.TamperFinding{Path: file, Kind: "disagrees",
				Reason: fmt.Sprintf("reward 1, but the runner's sessions ended %v (%d started)", ch.ExitStatuses, ch.Sessions)})
		}
	}
	return out
}
