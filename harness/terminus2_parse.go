package harness

import (
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strings"
)

// Terminus-2's reply rules, as Harbor's TerminusJSONPlainParser applies them:
// analysis, plan and commands are required; a missing duration is 1.0 s;
// unknown fields, text around the object, a "true" string and fields out of
// order are warnings; a reply the JSON reader refuses is retried once with
// its missing closing braces added, then with the first parseable {...} in
// it. harness_terminus2_test.go checks every rule against Harbor's own parser
// over harness/testdata/terminus2-replies.json.

// Parsed is one reply as Terminus-2 reads it. Error non-empty: nothing runs.
type Parsed struct {
	Commands     []Keys
	TaskComplete bool
	Error        string
	Warning      string // "- " lines, as the model sees them
	Analysis     string
	Plan         string
}

// Feedback is what Harbor's loop makes of the parse: "ERROR: ..." (with the
// warnings after it) or "WARNINGS: ...", or "" for a clean reply.
func (p Parsed) Feedback() string {
	switch {
	case p.Error != "" && p.Warning != "":
		return "ERROR: " + p.Error + "\nWARNINGS: " + p.Warning
	case p.Error != "":
		return "ERROR: " + p.Error
	case p.Warning != "":
		return "WARNINGS: " + p.Warning
	}
	return ""
}

// ParseTerminus2 reads a reply with Harbor's rules; py313 selects CPython
// 3.13's JSON errors (Harbor's interpreter: Spec.Py313).
func ParseTerminus2(reply string, py313 bool) Parsed {
	r := tryParse(reply, py313)
	if r.Error == "" {
		return r
	}
	for _, fix := range []struct {
		name string
		fn   func(string, string, bool) (string, bool)
	}{
		{"Fixed incomplete JSON by adding missing closing brace", fixIncomplete},
		{"Extracted JSON from mixed content", fixMixed},
	} {
		fixed, ok := fix.fn(reply, r.Error, py313)
		if !ok {
			continue
		}
		if c := tryParse(fixed, py313); c.Error == "" {
			auto := "- AUTO-CORRECTED: " + fix.name + " - please fix this in future responses"
			if c.Warning != "" {
				auto += "\n" + c.Warning
			}
			c.Warning = auto
			return c
		}
	}
	return r
}

func joinWarnings(w []string) string {
	if len(w) == 0 {
		return ""
	}
	return "- " + strings.Join(w, "\n- ")
}

func tryParse(reply string, py313 bool) Parsed {
	content, warnings := extractJSON(reply)
	fail := func(msg string) Parsed { return Parsed{Error: msg, Warning: joinWarnings(warnings)} }
	if content == "" {
		return fail("No valid JSON found in response")
	}
	v, err := pyLoads(content, py313)
	if err != nil {
		msg := "Invalid JSON: " + err.Error()
		if rs := []rune(content); len(rs) < 200 {
			msg += " | Content: " + pyRepr(content)
		} else {
			msg += " | Content preview: " + pyRepr(string(rs[:100])) + "..."
		}
		return fail(msg)
	}
	data := v.(*pyObject) // extractJSON's content is a {...}
	if msg := validate(data, content, &warnings); msg != "" {
		return fail(msg)
	}
	complete := pyTruthy(taskComplete(data))
	analysis, plan := pyStr(data, "analysis"), pyStr(data, "plan")
	cmdsV, _ := data.get("commands")
	cmds, perr := parseCommands(cmdsV.([]pyValue), &warnings)
	switch {
	case perr != "" && complete:
		warnings = append(warnings, perr)
		return Parsed{TaskComplete: true, Warning: joinWarnings(warnings), Analysis: analysis, Plan: plan}
	case perr != "":
		return Parsed{Error: perr, Warning: joinWarnings(warnings), Analysis: analysis, Plan: plan}
	}
	return Parsed{Commands: cmds, TaskComplete: complete, Warning: joinWarnings(warnings), Analysis: analysis, Plan: plan}
}

// taskComplete is the field with a string read as "true", "1" or "yes".
func taskComplete(data *pyObject) pyValue {
	v, ok := data.get("task_complete")
	if !ok {
		return false
	}
	if s, isStr := v.(string); isStr {
		l := strings.ToLower(s)
		return l == "true" || l == "1" || l == "yes"
	}
	return v
}

// pyStr is a field as the trajectory records it: the string, or "" when absent.
func pyStr(data *pyObject, k string) string {
	v, ok := data.get(k)
	if !ok {
		return ""
	}
	if s, isStr := v.(string); isStr {
		return s
	}
	return fmt.Sprint(v)
}

// extractJSON is the first balanced {...} outside strings, and warnings for
// text around it.
func extractJSON(reply string) (string, []string) {
	rs := []rune(reply)
	start, end, depth := -1, -1, 0
	inString, escape := false, false
	for i, c := range rs {
		if escape {
			escape = false
			continue
		}
		if c == '\\' {
			escape = true
			continue
		}
		if c == '"' {
			inString = !inString
			continue
		}
		if inString {
			continue
		}
		if c == '{' {
			if depth == 0 {
				start = i
			}
			depth++
		} else if c == '}' {
			depth--
			if depth == 0 && start != -1 {
				end = i + 1
				break
			}
		}
	}
	if start == -1 || end == -1 {
		return "", []string{"No valid JSON object found"}
	}
	var w []string
	if pyStrip(string(rs[:start])) != "" {
		w = append(w, "Extra text detected before JSON object")
	}
	if pyStrip(string(rs[end:])) != "" {
		w = append(w, "Extra text detected after JSON object")
	}
	return string(rs[start:end]), w
}

// pyStrip is str.strip(): Python's whitespace, which includes \x1c-\x1f.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

func pyIsSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x85 && (r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000)
}

func validate(data *pyObject, content string, warnings *[]string) string {
	var missing []string
	for _, f := range []string{"analysis", "plan", "commands"} {
		if _, ok := data.get(f); !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return "Missing required fields: " + strings.Join(missing, ", ")
	}
	for _, f := range []string{"analysis", "plan"} {
		if v, _ := data.get(f); !isStr(v) {
			*warnings = append(*warnings, fmt.Sprintf("Field '%s' should be a string", f))
		}
	}
	if v, _ := data.get("commands"); !isList(v) {
		return "Field 'commands' must be an array"
	}
	checkFieldOrder(content, warnings)
	if v, ok := data.get("task_complete"); ok && v != nil {
		if _, b := v.(bool); !b && !isStr(v) {
			*warnings = append(*warnings, "Field 'task_complete' should be a boolean or string")
		}
	}
	return ""
}

func isStr(v pyValue) bool  { _, ok := v.(string); return ok }
func isList(v pyValue) bool { _, ok := v.([]pyValue); return ok }

// fieldPatterns find each required field's first `"name"\s*:` in the text,
// strings included, as Harbor's re.search does (Python's \s is Unicode).
var fieldPatterns = func() map[string]*regexp.Regexp {
	m := map[string]*regexp.Regexp{}
	for _, f := range []string{"analysis", "plan", "commands"} {
		m[f] = regexp.MustCompile(`"` + f + `"[\s\v\x1c-\x1f\x{85}\p{Z}]*:`)
	}
	return m
}()

func checkFieldOrder(content string, warnings *[]string) {
	type at struct {
		field string
		pos   int
	}
	var present []at
	for _, f := range []string{"analysis", "plan", "commands"} {
		if loc := fieldPatterns[f].FindStringIndex(content); loc != nil {
			present = append(present, at{f, loc[0]})
		}
	}
	if len(present) < 2 {
		return
	}
	expected := make([]string, len(present))
	for i, p := range present {
		expected[i] = p.field
	}
	sort.SliceStable(present, func(i, j int) bool { return present[i].pos < present[j].pos })
	actual := make([]string, len(present))
	for i, p := range present {
		actual[i] = p.field
	}
	if strings.Join(actual, ",") != strings.Join(expected, ",") {
		*warnings = append(*warnings, fmt.Sprintf("Fields appear in wrong order. Found: %s, expected: %s",
			strings.Join(actual, " → "), strings.Join(expected, " → ")))
	}
}

// parseCommands reads the commands list; the error is the first bad entry.
func parseCommands(list []pyValue, warnings *[]string) ([]Keys, string) {
	var cmds []Keys
	for i, raw := range list {
		n := i + 1
		o, ok := raw.(*pyObject)
		if !ok {
			return nil, fmt.Sprintf("Command %d must be an object", n)
		}
		ksV, ok := o.get("keystrokes")
		if !ok {
			return nil, fmt.Sprintf("Command %d missing required 'keystrokes' field", n)
		}
		ks, ok := ksV.(string)
		if !ok {
			return nil, fmt.Sprintf("Command %d 'keystrokes' must be a string", n)
		}
		dur := 1.0
		if dv, ok := o.get("duration"); !ok {
			*warnings = append(*warnings, fmt.Sprintf("Command %d: Missing duration field, using default 1.0", n))
		} else if f, isNum := pyNumber(dv); !isNum {
			*warnings = append(*warnings, fmt.Sprintf("Command %d: Invalid duration value, using default 1.0", n))
		} else {
			dur = f
		}
		var unknown []string
		for _, k := range o.keys {
			if k != "keystrokes" && k != "duration" {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			// Harbor joins a set: with two or more, its order is the hash's.
			sort.Strings(unknown)
			*warnings = append(*warnings, fmt.Sprintf("Command %d: Unknown fields: %s", n, strings.Join(unknown, ", ")))
		}
		if i < len(list)-1 && ks != "" && !strings.HasSuffix(ks, "\n") {
			*warnings = append(*warnings, fmt.Sprintf("Command %d should end with newline when followed by another command. Otherwise the two commands will be concatenated together on the same line.", n))
		}
		cmds = append(cmds, Keys{Keystrokes: ks, Duration: dur})
	}
	return cmds, ""
}

// pyNumber is isinstance(v, (int, float)) (a bool is an int) and float(v).
func pyNumber(v pyValue) (float64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	case float64:
		return x, true
	}
	return 0, false
}

// fixIncomplete appends the closing braces a cut reply lacks.
func fixIncomplete(reply, err string, _ bool) (string, bool) {
	if !strings.Contains(err, "Invalid JSON") && !strings.Contains(err, "Expecting") &&
		!strings.Contains(err, "Unterminated") && !strings.Contains(err, "No valid JSON found") {
		return reply, false
	}
	if n := strings.Count(reply, "{") - strings.Count(reply, "}"); n > 0 {
		return reply + strings.Repeat("}", n), true
	}
	return reply, false
}

var mixedJSON = regexp.MustCompile(`\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}`)

// fixMixed takes the first {...} (one level of nesting) that parses.
func fixMixed(reply, _ string, py313 bool) (string, bool) {
	for _, m := range mixedJSON.FindAllString(reply, -1) {
		if _, err := pyLoads(m, py313); err == nil {
			return m, true
		}
	}
	return reply, false
}
