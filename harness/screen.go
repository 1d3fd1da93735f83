package harness

import "strings"

// Observations are read as Harbor's TmuxSession reads them: the pane's whole
// scrollback (capture-pane -p -S -) is compared with the previous capture,
// and what follows the previous capture's last line is the new output;
// when there is none, or the previous text is gone from the scrollback (a
// clear, a full-screen program), the visible screen is shown instead.

// IncrementalOutput is get_incremental_output: previous is the last capture
// (nil before the first), current the scrollback now, visible the screen now.
func (s *Spec) IncrementalOutput(previous *string, current, visible string) string {
	if previous == nil {
		return s.ScreenLabel + visible
	}
	if out, ok := FindNewContent(previous, current); ok && pyStrip(out) != "" {
		return s.NewOutputLabel + out
	}
	return s.ScreenLabel + visible
}

// FindNewContent is _find_new_content (previous nil: none yet), indices in
// characters as Python's are. Harbor takes the cut from the previous text's
// last newline, an index into the previous text, not into the scrollback;
// kept as Harbor does it.
func FindNewContent(previous *string, current string) (string, bool) {
	pb := ""
	if previous != nil {
		pb = pyStrip(*previous)
	}
	if !strings.Contains(current, pb) {
		return "", false
	}
	cur := []rune(current)
	idx := len([]rune(current[:strings.Index(current, pb)]))
	if strings.Contains(pb, "\n") {
		p := []rune(pb)
		for idx = len(p) - 1; p[idx] != '\n'; idx-- {
		}
	}
	if idx > len(cur) {
		return "", true
	}
	return string(cur[idx:]), true
}
