package activities

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
)

// The turn journal makes AgentTurn idempotent. Before a turn's command (or a
// model's keystrokes) reaches the sandbox, an entry keyed by (rollout,
// sandbox, turn) is written and fsynced on the sandbox host, next to the
// episode; the turn's result follows it. A retried turn — whatever its
// activity attempt — reads the entry first: a recorded result is returned, a
// policy turn whose keystrokes were sent resumes after them, and a turn that
// started without either is lost: never sent again, reported as TurnLost.

// Journal states.
const (
	journalStarted = "started" // the command or keystrokes are being sent
	journalTyped   = "typed"   // a policy turn's keystrokes were sent: Segment and Obs hold what followed
	journalDone    = "done"    // Result is the turn's result
)

// journalEntry is one turn's record on the sandbox host.
type journalEntry struct {
	Container string      `json:"container"` // an entry of another container (a re-run rollout) is stale
	Turn      int         `json:"turn"`
	State     string      `json:"state"`
	At        time.Time   `json:"at"`
	Command   string      `json:"command,omitempty"`
	Result    *TurnResult `json:"result,omitempty"`
	Segment   *segment    `json:"segment,omitempty"`
	Obs       string      `json:"observation,omitempty"`
}

func (a *Activities) journalPath(in TurnInput) string {
	return filepath.Join(a.episodeDir(in.RolloutID, in.Sandbox.Name), fmt.Sprintf("journal-%05d.json", in.Turn))
}

// readJournal returns the turn's entry; nil when it has none in this container.
func (a *Activities) readJournal(in TurnInput) (*journalEntry, error) {
	b, err := os.ReadFile(a.journalPath(in))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Infraf("turn journal: %v", err)
	}
	var e journalEntry
	if err := json.Unmarshal(b, &e); err != nil {
		// Entries are renamed into place whole, so this is not a torn write.
		return nil, errs.Infraf("turn journal %s: %v", a.journalPath(in), err)
	}
	if e.Container != in.Sandbox.ContainerID || e.Turn != in.Turn {
		return nil, nil
	}
	return &e, nil
}

// writeJournal durably records the turn's entry: the file and its directory
// are fsynced before it returns, so an entry written before a command is sent
// survives a crash of the worker or the host.
func (a *Activities) writeJournal(in TurnInput, e journalEntry) error {
	e.Container, e.Turn, e.At = in.Sandbox.ContainerID, in.Turn, time.Now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return errs.Infraf("turn journal: %v", err)
	}
	p := a.journalPath(in)
	if err := writeSynced(p, b); err != nil {
		return errs.Infraf("turn journal: %v", err)
	}
	return nil
}

func writeSynced(p string, b []byte) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// journalStart is the exec's Starting hook of a turn: the entry is on disk
// before the command or keystrokes are sent.
func (a *Activities) journalStart(in TurnInput, command string) func() error {
	return func() error {
		return a.writeJournal(in, journalEntry{State: journalStarted, Command: command})
	}
}

// lostTurn reports a turn that started and recorded nothing.
func lostTurn(in TurnInput, e *journalEntry) error {
	return errs.TurnLostf("turn %d in %s was lost: it was sent to the sandbox at %s (%q) and its result was never recorded (the worker died mid-turn); it is not sent again, and the episode starts over in a fresh sandbox",
		in.Turn, in.Sandbox.Name, e.At.Format(time.RFC3339), e.Command)
}

// sent is the test hook that runs right after a turn's command or keystrokes
// were sent and before anything is recorded: an error there is a worker
// that died mid-turn.
func (a *Activities) sent(in TurnInput) error {
	if a.afterSend == nil {
		return nil
	}
	return a.afterSend(in)
}
