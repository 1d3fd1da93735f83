package workflows

import "go.temporal.io/sdk/workflow"

// slidingWindow starts n jobs in order, at most k.limit() at a time, calling
// done as each finishes (in completion order); a change of k takes effect at
// once. It returns early only when ctx is cancelled.
func slidingWindow(ctx workflow.Context, n int, k *concurrency, running *int,
	start func(i int) workflow.Future, done func(i int, f workflow.Future)) error {
	sel := workflow.NewSelector(ctx)
	k.watch(ctx, sel)
	next := 0
	for next < n || *running > 0 {
		for *running < k.limit() && next < n {
			i := next
			next++
			*running++
			f := start(i)
			sel.AddFuture(f, func(f workflow.Future) {
				*running--
				done(i, f)
			})
		}
		sel.Select(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
