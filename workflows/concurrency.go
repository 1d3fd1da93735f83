package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"
)

// SignalSetConcurrency is how a campaign's set_concurrency reaches the PPO
// step or critic warm-up it is running: the parent signals its child (a
// workflow cannot send another an update).
const SignalSetConcurrency = "set_concurrency"

// MaxConcurrency bounds set_concurrency.
const MaxConcurrency = 1024

func validConcurrency(n int) error {
	if n < 1 || n > MaxConcurrency {
		return fmt.Errorf("set_concurrency %d: must be between 1 and %d", n, MaxConcurrency)
	}
	return nil
}

// concurrency is the rollout window's width of a running sweep, step or
// warm-up. It changes while the window runs, by the set_concurrency update
// (an operator) or signal (the parent campaign); wake tells a window blocked
// on its rollouts to look again, so a raise starts rollouts at once and a
// cut starts none until the rollouts in flight fall below it (none is
// cancelled). Neither handler issues a command: histories without the
// update or signal replay unchanged.
type concurrency struct {
	n    int
	wake workflow.Channel
	// stop ends the signal receiver once it has applied the value it holds.
	stop func(ctx workflow.Context)
}

// newConcurrency registers set_concurrency on the workflow; the update
// answers with progress().
func newConcurrency(ctx workflow.Context, n int, progress func() Progress) (*concurrency, error) {
	k := &concurrency{n: max(n, 1), wake: workflow.NewBufferedChannel(ctx, 1)}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSetConcurrency, func(ctx workflow.Context, n int) (Progress, error) {
		k.set(n)
		return progress(), nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n int) error { return validConcurrency(n) }})
	if err != nil {
		return nil, err
	}
	// Not stopped by a cancel of the workflow (the receiver before final
	// was not): only final stops it.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	k.stop = receiveUntilStopped(dctx, SignalSetConcurrency, k.signalled)
	return k, nil
}

func (k *concurrency) signalled(ctx workflow.Context, n int) {
	if validConcurrency(n) != nil {
		workflow.GetLogger(ctx).Warn("set_concurrency signal ignored", "concurrency", n)
		return
	}
	k.set(n)
}

// final is the width a continue-as-new hands on: the set_concurrency
// signals that came in with the run's last workflow task are applied first
// (the receiver, which may hold one, finishes; the rest are in the
// channel), or the next run would never see them.
func (k *concurrency) final(ctx workflow.Context) int {
	if k.stop == nil {
		return k.n
	}
	k.stop(ctx)
	return k.n
}

func (k *concurrency) set(n int) {
	k.n = n
	k.wake.SendAsync(struct{}{}) // a wake already pending is enough
}

// fixedConcurrency is a width no one changes (synthesis and audit sweeps).
func fixedConcurrency(n int) *concurrency { return &concurrency{n: max(n, 1)} }

// limit is the window's width now.
func (k *concurrency) limit() int { return k.n }

// watch makes sel return when the width changes.
func (k *concurrency) watch(ctx workflow.Context, sel workflow.Selector) {
	if k.wake == nil {
		return
	}
	sel.AddReceive(k.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
}
