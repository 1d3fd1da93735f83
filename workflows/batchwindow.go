package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

// A PPO step's or critic warm-up's collection of any size (GetVersion
// step-continue-as-new): collectRetrying's rules (aborted samples start
// again after a backoff until the deadline, each start a slot of the
// window) over a rolloutWindow, so the workflow continues as new every
// ContinueEvery starts (or when Temporal suggests it) with rollouts in
// flight. The batch goes to the store in chunks of FlushEvery trajectory
// refs; the trainer reads them (gpu.TrainInput.Chunks).

// BatchWindow is a collection's state, handed from run to run.
type BatchWindow struct {
	Stage    string    `json:"stage"`
	Step     int       `json:"step"`
	Deadline time.Time `json:"deadline"` // no sample starts again after it
	Next     int       `json:"next"`     // samples started for the first time
	// Ready: samples whose retry is due, started before Next.
	Ready []int `json:"ready,omitempty"`
	// Backoff: samples waiting to start again after an abort.
	Backoff []BackoffEntry `json:"backoff,omitempty"`
	Retries []int          `json:"retries"` // per sample, starts after an abort
	// InFlight: rollout workflow ID -> sample, started and not reported.
	InFlight map[string]int      `json:"in_flight"`
	Counts   BatchCounts         `json:"counts"`
	Pending  []gpu.TrajectoryRef `json:"pending,omitempty"` // batch not yet in a chunk
	Chunks   []store.Ref         `json:"chunks,omitempty"`
	Runs     int                 `json:"runs"` // runs before this one
	// Adopted: rollouts the previous step handed on (RolloutBatch.Carried)
	// still in flight here, under job adoptedJob; their results come from
	// Temporal (oversample.go).
	Adopted map[string]RolloutInput `json:"adopted,omitempty"`
}

// BackoffEntry is a sample that starts again at Due.
type BackoffEntry struct {
	Sample int       `json:"sample"`
	Due    time.Time `json:"due"`
}

// batchWindow is one run of a windowed collection.
type batchWindow struct {
	b      RolloutBatch
	w      *BatchWindow
	rw     *rolloutWindow
	width  *concurrency
	starts *int // rollouts the workflow's run started, over all its collections
	draws  map[string]int
	first  []int // sample -> its first attempt number (collect's attempt)
	status *int  // the workflow's Progress.Running
}

// BatchChunkKey is where chunk n of a collection's batch is stored (a JSON
// array of gpu.TrajectoryRef).
func BatchChunkKey(b RolloutBatch, stage string, step, n int) string {
	return fmt.Sprintf("batches/%s/%s%s-%d/%06d.json", ids.Clean(b.Campaign), ids.Clean(b.KeyPrefix), stage, step, n)
}

// collectWindowed runs the collection (stage, step) of b, resuming
// b.Window when it is this collection's; cont(window) is the continue-as-new
// error that hands it to the next run.
func collectWindowed(ctx workflow.Context, b RolloutBatch, stage string, step int, attempt []int, running, starts *int, width *concurrency,
	cont func(*BatchWindow) error) (collected, error) {
	bw := &batchWindow{b: b, width: width, status: running, starts: starts, first: attempt, draws: map[string]int{}}
	for _, t := range b.Tasks {
		bw.draws[t.ID]++
	}
	bw.w = b.Window
	if bw.w == nil || bw.w.Stage != stage || bw.w.Step != step {
		minutes := b.DeadlineMinutes
		if minutes <= 0 {
			minutes = DefaultStepDeadlineMinutes
		}
		bw.w = &BatchWindow{Stage: stage, Step: step, Deadline: workflow.Now(ctx).Add(time.Duration(minutes * float64(time.Minute))),
			Retries: make([]int, len(b.Tasks)), InFlight: map[string]int{}}
		bw.adopt(b.Carried)
	}
	if bw.w.InFlight == nil {
		bw.w.InFlight = map[string]int{}
	}
	if len(bw.w.Retries) != len(b.Tasks) {
		bw.w.Retries = make([]int, len(b.Tasks))
	}
	bw.rw = newRolloutWindow(bw.w.InFlight, bw.result)
	bw.rw.receive(ctx)
	if len(bw.w.Adopted) > 0 {
		bw.rw.pollAdopted(ctx, bw.w.Adopted)
	}
	for _, e := range bw.w.Backoff { // timers of the last run died with it
		bw.wake(ctx, e)
	}
	*running = len(bw.w.InFlight)
	every := b.ContinueEvery
	if every <= 0 {
		every = DefaultContinueEvery
	}
	for {
		err := bw.rw.await(ctx, func() bool { return bw.canStart() || bw.finished() })
		if err == nil {
			err = ctx.Err() // Await returns nil on a condition already true, cancelled or not
		}
		if err != nil {
			return collected{}, bw.failed(ctx, err)
		}
		if bw.finished() {
			if bw.b.Need > 0 {
				return bw.handOn(ctx), nil
			}
			// The next collection of this run (a warm-up's) has a receiver of its own.
			bw.rw.stopReceiving(ctx)
			return bw.collected(), nil
		}
		if *bw.starts >= every || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return collected{}, bw.continueAsNew(ctx, cont)
		}
		if len(bw.w.Pending) >= FlushEvery {
			if err := bw.flush(ctx); err != nil {
				return collected{}, bw.failed(ctx, err)
			}
		}
		bw.startNext(ctx)
	}
}

func (bw *batchWindow) canStart() bool {
	return len(bw.w.InFlight) < bw.width.limit() && (len(bw.w.Ready) > 0 || bw.w.Next < len(bw.b.Tasks))
}

func (bw *batchWindow) finished() bool {
	if bw.b.Need > 0 && bw.w.Counts.Rollouts >= bw.b.Need {
		return true
	}
	return bw.w.Next >= len(bw.b.Tasks) && len(bw.w.Ready) == 0 && len(bw.w.Backoff) == 0 && len(bw.w.InFlight) == 0
}

// startNext starts a sample whose retry is due, else the next new one.
func (bw *batchWindow) startNext(ctx workflow.Context) {
	w, b := bw.w, bw.b
	var i int
	if len(w.Ready) > 0 {
		i, w.Ready = w.Ready[0], w.Ready[1:]
	} else {
		i = w.Next
		w.Next++
	}
	rin := bw.input(i)
	summary := fmt.Sprintf("%s %s %d: %s", b.Campaign, w.Stage, w.Step, b.Tasks[i].Name)
	if w.Retries[i] > 0 {
		summary += fmt.Sprintf(" (retry %d after an abort)", w.Retries[i])
	}
	bw.rw.start(ctx, rin, summary, i)
	*bw.starts++
	*bw.status = len(w.InFlight)
}

// input is sample i's next start: retry w.Retries[i] of it.
func (bw *batchWindow) input(i int) RolloutInput {
	w, b := bw.w, bw.b
	agent := b.Agent
	agent.Inference = rotate(b.Agent.Inference, w.Retries[i])
	t := b.Tasks[i]
	// Attempts 1..draws are the samples of a task; retry k of a sample is k draws on.
	return RolloutInput{CampaignID: b.Campaign, Stage: w.Stage, Step: w.Step, Task: t, Attempt: bw.first[i] + w.Retries[i]*bw.draws[t.ID],
		Agent: agent, TurnCap: b.TurnCap, S: b.S}
}

// result takes sample i's outcome: an abort before the deadline waits its
// backoff and starts again; anything else is counted, and a trajectory
// joins the batch.
func (bw *batchWindow) result(ctx workflow.Context, r RolloutResult, i int) {
	w := bw.w
	*bw.status = len(w.InFlight)
	if i == adoptedJob {
		bw.adoptedResult(r)
		return
	}
	if r.Outcome == OutcomeAborted {
		wait := min(abortBackoff<<min(w.Retries[i], 16), abortBackoffMax)
		if due := workflow.Now(ctx).Add(wait); due.Before(w.Deadline) {
			e := BackoffEntry{Sample: i, Due: due}
			w.Backoff = append(w.Backoff, e)
			bw.wake(ctx, e)
			return
		}
	}
	c := collected{BatchCounts: w.Counts}
	c.add(r, bw.b)
	c.took(w.Retries[i])
	w.Counts, w.Pending = c.BatchCounts, append(w.Pending, c.batch...)
}

// wake moves sample e.Sample to the front of Ready at e.Due.
func (bw *batchWindow) wake(ctx workflow.Context, e BackoffEntry) {
	workflow.Go(ctx, func(ctx workflow.Context) {
		if d := e.Due.Sub(workflow.Now(ctx)); d > 0 {
			if workflow.Sleep(ctx, d) != nil {
				return // the run ended; the entry travels to the next
			}
		}
		w := bw.w
		for k, x := range w.Backoff {
			if x.Sample == e.Sample && x.Due.Equal(e.Due) {
				w.Backoff = append(w.Backoff[:k:k], w.Backoff[k+1:]...)
				break
			}
		}
		w.Retries[e.Sample]++
		w.Ready = append([]int{e.Sample}, w.Ready...) // before samples not yet started
	})
}

// flush writes the batch received so far as the next chunk.
func (bw *batchWindow) flush(ctx workflow.Context) error {
	w := bw.w
	if len(w.Pending) == 0 {
		return nil
	}
	// Results that come in while the chunk is stored join Pending after it.
	chunk := w.Pending
	w.Pending = nil
	key := BatchChunkKey(bw.b, w.Stage, w.Step, len(w.Chunks))
	var ref store.Ref
	if err := storeJSON(ctx, fmt.Sprintf("store batch chunk %d (%d)", len(w.Chunks), len(chunk)), key, chunk).Get(ctx, &ref); err != nil {
		w.Pending = append(chunk, w.Pending...)
		return err
	}
	w.Chunks = append(w.Chunks, ref)
	return nil
}

// collected is the finished collection: the chunks stored, then the rest
// (under FlushEvery refs) inline.
func (bw *batchWindow) collected() collected {
	return collected{batch: bw.w.Pending, chunks: bw.w.Chunks, BatchCounts: bw.w.Counts}
}

// continueAsNew hands the window to the next run once every rollout this
// run started has started and the batch so far is in a chunk; results that
// come in meanwhile travel in the window.
func (bw *batchWindow) continueAsNew(ctx workflow.Context, cont func(*BatchWindow) error) error {
	bw.rw.settleStarts(ctx)
	if err := bw.flush(ctx); err != nil {
		return bw.failed(ctx, err)
	}
	if err := bw.rw.drain(ctx); err != nil {
		return bw.failed(ctx, err)
	}
	if err := ctx.Err(); err != nil { // a cancel must not be carried off into a new run
		return bw.failed(ctx, err)
	}
	bw.w.Runs++
	return cont(bw.w)
}

// failed: the collection cannot go on (it was cancelled, or its batch could
// not be stored): every rollout in flight is asked to cancel, this run's
// once started, so none runs on and a rerun finds no orphan holding its IDs.
func (bw *batchWindow) failed(ctx workflow.Context, err error) error {
	bw.rw.cancelAll(ctx)
	return err
}

// rotate moves the first k replicas to the end: a rollout's first request
// goes to the pool's first replica, so retry k starts on another one.
func rotate(urls []string, k int) []string {
	if len(urls) < 2 || k%len(urls) == 0 {
		return urls
	}
	k %= len(urls)
	return append(append([]string{}, urls[k:]...), urls[:k]...)
}

// took counts a sample whose outcome counted after retries starts.
func (c *BatchCounts) took(retries int) {
	for len(c.Retries) <= retries {
		c.Retries = append(c.Retries, 0)
	}
	c.Retries[retries]++
}
