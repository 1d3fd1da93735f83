package activities

import (
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/harness"
)

func TestT2KeysAreTmuxKeys(t *testing.T) {
	s := t2Keys([]harness.Keys{{Keystrokes: "C-c", Duration: 0.5}, {Keystrokes: "echo 'hi'\n", Duration: 100}, {Keystrokes: ""}}, 5*time.Second)
	for _, want := range []string{
		"tmux send-keys -t terminus-2 -- 'C-c'\n",
		`tmux send-keys -t terminus-2 -- 'echo '\''hi'\''` + "\n'\n",
		"tmux send-keys -t terminus-2 -- ''\n",
		"w=$(( 500 - ", "w=$(( 4500 - ", // the second waits what is left of the budget
	} {
		if !strings.Contains(s, want) {
			t.Errorf("keys script lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, " -l ") {
		t.Errorf("keys sent literally (-l): C-c would be typed as letters:\n%s", s)
	}
}
