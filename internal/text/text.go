// Package text holds the small string helpers that logs, summaries, errors
// and generated shell scripts share.
package text

import (
	"strings"
	"unicode/utf8"
)

// Truncate cuts s to at most n bytes, on a rune boundary, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ShellQuote quotes s as one word for a POSIX shell.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
