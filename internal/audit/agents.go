package audit

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Agents are the scripted solutions the audit runs besides the reference:
// ones that should not pass (a weak verifier lets them) and the leak seeker.
// An empty script means the agent has nothing to try on this task.
type Agents struct {
	Trivial  string `json:"trivial,omitempty"`  // every output written with constant content
	Shortcut string `json:"shortcut,omitempty"` // programs the tests run replaced by ones printing the expected literals
	Leak     string `json:"leak,omitempty"`     // searches the image for asserted values and writes them where the tests look
}

// TrivialContent is what the trivial agent writes into every output.
const TrivialContent = "t1flow-audit-constant"

//go:embed leakseek.py
var leakSeeker string

var anyPath = regexp.MustCompile(`/[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)+`)

// buildAgents writes the agents' scripts from the outputs the tests check.
func buildAgents(outs []Output, inputs []string, instr, solution string) Agents {
	var a Agents
	if len(outs) == 0 {
		return a
	}
	var triv, short strings.Builder
	triv.WriteString("#!/bin/bash\n# audit: every output the tests check, with constant content\n")
	short.WriteString("#!/bin/bash\n# audit: programs the tests run print the tests' expected literals\n")
	execWithValues := false
	for _, o := range outs {
		q := shQuote(o.Path)
		switch o.Kind {
		case "dir":
			fmt.Fprintf(&triv, "mkdir -p %s\n", q)
			fmt.Fprintf(&short, "mkdir -p %s\n", q)
		case "exec":
			fmt.Fprintf(&triv, "mkdir -p \"$(dirname %s)\"\nprintf '#!/bin/sh\\necho %s\\n' > %s\nchmod +x %s\n", q, TrivialContent, q, q)
			fmt.Fprintf(&short, "mkdir -p \"$(dirname %s)\"\n{ echo '#!/bin/sh'; %s } > %s\nchmod +x %s\n", q, printfLines(o.Values, true), q, q)
			execWithValues = execWithValues || len(o.Values) > 0
		default:
			fmt.Fprintf(&triv, "mkdir -p \"$(dirname %s)\"\n[ -d %s ] || echo %s > %s\n", q, q, TrivialContent, q)
			fmt.Fprintf(&short, "mkdir -p \"$(dirname %s)\"\n{ %s } > %s\n", q, printfLines(o.Values, false), q)
		}
	}
	a.Trivial = triv.String()
	if execWithValues {
		a.Shortcut = short.String()
	}
	a.Leak = leakScript(outs, inputs, instr, solution)
	return a
}

// leakScript is the leak seeker with its spec; "" when no output has a
// literal value to look for.
func leakScript(outs []Output, inputs []string, instr, solution string) string {
	type spec struct {
		Path   string   `json:"path"`
		Kind   string   `json:"kind"`
		Values []string `json:"values"`
	}
	var specs []spec
	for _, o := range outs {
		if len(o.Values) > 0 && o.Kind != "dir" {
			specs = append(specs, spec{o.Path, o.Kind, o.Values})
		}
	}
	if len(specs) == 0 {
		return ""
	}
	// The task's own inputs: what the environment hands over for the tests to
	// read, and every path the instruction names or the solution reads.
	ins := append([]string{}, inputs...)
	ins = appendNew(ins, anyPath.FindAllString(instr, -1)...)
	ins = appendNew(ins, anyPath.FindAllString(solution, -1)...)
	for i := 0; i < len(ins); i++ {
		for _, o := range specs {
			if ins[i] == o.Path {
				ins = append(ins[:i], ins[i+1:]...)
				i--
				break
			}
		}
	}
	b, _ := json.Marshal(map[string]any{"outputs": specs, "inputs": ins})
	return "#!/bin/bash\n# audit: the leak seeker\nexec python3 - <<'T1FLOW_LEAK_SEEKER'\nSPEC = __import__('json').loads(" +
		pyQuote(string(b)) + ")\n" + leakSeeker + "T1FLOW_LEAK_SEEKER\n"
}

func printfLines(vals []string, asScript bool) string {
	if len(vals) == 0 {
		return "true;"
	}
	var parts []string
	for _, v := range vals {
		if asScript {
			parts = append(parts, "printf '%s\\n' "+shQuote("printf '%s\\n' "+shQuote(v))+";")
		} else {
			parts = append(parts, "printf '%s\\n' "+shQuote(v)+";")
		}
	}
	return strings.Join(parts, " ")
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func pyQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
