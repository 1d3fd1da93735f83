package text

import (
	"os/exec"
	"testing"
)

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 3, "abc…"},
		{"héllo", 2, "h…"}, // never splits the two bytes of é
	} {
		if got := Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestShellQuoteRoundTrips(t *testing.T) {
	for _, s := range []string{"plain", "it's", `a "b" $HOME; rm -rf / && echo`, "", "new\nline"} {
		out, err := exec.Command("sh", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("sh read %q back as %q", s, out)
		}
	}
}
