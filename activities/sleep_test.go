package activities

import (
	"context"
	"testing"
	"time"
)

// The sleep backend is never taken by default or by mistake: only
// -sandbox-backend sleep with T1FLOW_LOAD_TEST=1.
func TestSleepBackendNeedsExplicitOptIn(t *testing.T) {
	t.Setenv(LoadTestEnv, "")
	for _, b := range []string{"", "docker"} {
		if sleep, err := CheckSleepBackend(b); sleep || err != nil {
			t.Errorf("%q: sleep %v, %v; want docker", b, sleep, err)
		}
	}
	if sleep, err := CheckSleepBackend(SleepBackend); sleep || err == nil {
		t.Errorf("sleep without %s=1 accepted", LoadTestEnv)
	}
	if _, err := CheckSleepBackend("Sleep"); err == nil {
		t.Error("an unknown backend accepted")
	}
	t.Setenv(LoadTestEnv, "1")
	if sleep, err := CheckSleepBackend(SleepBackend); !sleep || err != nil {
		t.Errorf("sleep with %s=1: %v %v", LoadTestEnv, sleep, err)
	}
}

// Its activities sleep and answer without Docker (a.Docker is nil here).
func TestSleepBackendRunsNoSandbox(t *testing.T) {
	a := &Activities{Sleep: 10 * time.Millisecond, Host: "h"}
	ctx := context.Background()
	start := time.Now()
	cs, err := a.CreateSandbox(ctx, CreateSandboxInput{RolloutID: "r", SandboxAttempt: 1})
	if err != nil || cs.Sandbox.HostQueue == "" {
		t.Fatalf("create: %+v %v", cs, err)
	}
	if tr, err := a.AgentTurn(ctx, TurnInput{Sandbox: cs.Sandbox}); err != nil || !tr.Done {
		t.Fatalf("turn: %+v %v", tr, err)
	}
	if vr, err := a.Verify(ctx, VerifyInput{Sandbox: cs.Sandbox}); err != nil || vr.Passed != 1 || vr.Total != 2 {
		t.Fatalf("verify: %+v %v", vr, err)
	}
	if err := a.DestroySandbox(ctx, DestroyInput{Sandbox: cs.Sandbox}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("3 sleeping activities took %s", d)
	}
}
