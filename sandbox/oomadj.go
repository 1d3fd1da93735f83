package sandbox

// oomReset gives the sandbox's PID 1 back oom_score_adj 0. Root in the
// sandbox can raise it (1000: PID 1 the OOM killer's first pick, so the
// tests filling the sandbox's memory stop the whole sandbox, which looks
// like the host's failure) and, having no CAP_SYS_RESOURCE, lower it back
// no further than the 0 it started with: 0 is what the verifier's exec, root
// too, can set.
const oomReset = `trap '{ echo 0 >/proc/1/oom_score_adj; } 2>/dev/null' EXIT
`

// WithPID1OOMReset returns argv, a toolchain shell command line
// (ToolchainSurveyCmd, ToolchainKillCmd), whose script resets PID 1's
// oom_score_adj to 0 as it exits: after it stopped the agent's processes,
// so none is left to raise it again.
func WithPID1OOMReset(argv []string) []string {
	out := append([]string(nil), argv...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-c" {
			out[i+1] = oomReset + out[i+1]
			return out
		}
	}
	return out
}
