package steptime

import (
	"context"
	"testing"
	"time"
)

func TestStepsAreTimedOnlyUnderAClock(t *testing.T) {
	Start(context.Background(), "nothing")() // no clock: a no-op
	c := &Clock{}
	ctx := With(context.Background(), c)
	end := Start(ctx, "a")
	time.Sleep(2 * time.Millisecond)
	end()
	Start(ctx, "b")()
	s := c.Steps()
	if len(s) != 2 || s[0].Name != "a" || s[1].Name != "b" || s[0].D < 2*time.Millisecond {
		t.Fatalf("steps %v", s)
	}
}
