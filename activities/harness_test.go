package activities

import (
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/harness"
)

func TestTmuxKeysQuotesAndWaits(t *testing.T) {
	s := tmuxKeys([]harness.Keys{{Keystrokes: "echo 'hi' $HOME\n", Duration: 2}, {Keystrokes: "q", Duration: 100}}, 5*time.Second)
	want := []string{
		`tmux send-keys -t t1flow -l -- 'echo '\''hi'\'' $HOME'`,
		"tmux send-keys -t t1flow Enter",
		"sleep 2.000",
		"tmux send-keys -t t1flow -l -- 'q'",
		"sleep 3.000", // what is left of the 5 s budget
	}
	if got := strings.Split(strings.TrimSpace(s), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got\n%s", s)
	}
}

func TestSplitPaneAndClean(t *testing.T) {
	n, body, err := splitPane("123\n---t1flow---\nhello\x1b[31m red\x1b[0m\r\n")
	if err != nil || n != 123 || cleanTerminal(body, 100, 100) != "hello red\n" {
		t.Fatalf("%d %q %v", n, cleanTerminal(body, 100, 100), err)
	}
	if _, _, err := splitPane("garbage"); err == nil {
		t.Fatal("want a marker error")
	}
}
