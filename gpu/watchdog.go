package gpu

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/httpjson"
)

// DefaultInferenceHangWindow is how long the inference server may go without
// answering its watchdog's probe before it counts as hung and is restarted.
const DefaultInferenceHangWindow = 30 * time.Second

// Watchdog finds a process that is up but hung: every Window/6 it probes the
// process (each probe bounded by Window/3), and once no probe has succeeded
// for Window it kills the process; the supervisor's monitor starts it again.
// A hang is so found within 1.5 × Window. A process is probed only once it
// has answered since its start, so a slow start is not a hang (the
// supervisor's health timeout covers that).
type Watchdog struct {
	Window time.Duration
	// Probe answers nil when the process serves; for an inference server
	// GET /health_generate, which runs the model (a wedged engine does not
	// answer it, while its /health may).
	Probe func(ctx context.Context, baseURL string) error
	hangs atomic.Int32
}

// EngineWatchdog is the watchdog of a local server of an engine kind: stock
// vLLM has no /health_generate, and its /health fails once its engine core
// is dead or wedged; the others are probed with InferenceWatchdog.
func EngineWatchdog(engine string, window time.Duration) *Watchdog {
	if engine != inference.EngineVLLM {
		return InferenceWatchdog(window)
	}
	return &Watchdog{Window: window, Probe: func(ctx context.Context, url string) error {
		return httpjson.Call(ctx, http.DefaultClient, "GET", url+"/health", "vllm /health", "", nil, nil)
	}}
}

// InferenceWatchdog probes an SGLang-compatible server's /health_generate.
func InferenceWatchdog(window time.Duration) *Watchdog {
	return &Watchdog{Window: window, Probe: func(ctx context.Context, url string) error {
		return httpjson.Call(ctx, http.DefaultClient, "GET", url+"/health_generate", "inference /health_generate", "", nil, nil)
	}}
}

// Hangs counts the hangs found.
func (w *Watchdog) Hangs() int { return int(w.hangs.Load()) }

// watch runs the watchdog until Stop.
func (s *Supervisor) watch() {
	w := s.Watchdog
	every, timeout := max(w.Window/6, 100*time.Millisecond), max(w.Window/3, 100*time.Millisecond)
	var proc chan struct{} // the process being watched (its exit channel)
	var lastOK time.Time   // zero: it has not answered since its start
	for {
		time.Sleep(every)
		s.mu.Lock()
		stopping, exited := s.stopping, s.exited
		s.mu.Unlock()
		if stopping {
			return
		}
		if exited != proc {
			proc, lastOK = exited, time.Time{}
		}
		select {
		case <-exited: // the monitor restarts it
			continue
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := w.Probe(ctx, s.URL())
		cancel()
		switch {
		case err == nil:
			lastOK = time.Now()
		case !lastOK.IsZero() && time.Since(lastOK) >= w.Window:
			w.hangs.Add(1)
			msg := fmt.Sprintf("--- %s: %s hung: no answer to its watchdog's probe for %s (window %s; last: %v); killing it to restart it\n",
				time.Now().Format(time.RFC3339), s.Name, time.Since(lastOK).Round(time.Second), w.Window, err)
			if f, ferr := os.OpenFile(s.LogPath, os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
				f.WriteString(msg)
				f.Close()
			}
			fmt.Fprint(os.Stderr, msg)
			s.Kill()
			lastOK = time.Time{}
		}
	}
}
