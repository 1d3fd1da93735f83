package gpu

import (
	"encoding/json"
	"testing"
)

// A trainer's beat (work between minibatch ticks) counts as progress: the
// bench's campaign restarted one PPO step 30 times because its whole-batch
// forwards before the first tick outlasted the stall window.
func TestProgressSigMovesWithTheBeat(t *testing.T) {
	var a, b Progress
	if err := json.Unmarshal([]byte(`{"op":"ppo_step","key":"k","done":0,"total":4,"beat":2}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"op":"ppo_step","key":"k","done":0,"total":4,"beat":3}`), &b); err != nil {
		t.Fatal(err)
	}
	if a.Beat != 2 || progressSig(a) == progressSig(b) {
		t.Fatalf("a new beat must move the progress: %q vs %q", progressSig(a), progressSig(b))
	}
	var old Progress // a trainer without beats: the counters alone
	if err := json.Unmarshal([]byte(`{"op":"ppo_step","key":"k","done":1,"total":4}`), &old); err != nil {
		t.Fatal(err)
	}
	if progressSig(old) == progressSig(a) {
		t.Fatal("done must still move the progress")
	}
}
