package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
)

// The reference trainer holds one set of weights, so one campaign at a time
// trains on it: a campaign takes the trainer's lease when it loads its init
// (TrainerInit) and holds it until its workflow ends (completed, failed,
// cancelled or terminated). Another campaign's init, or a training
// operation under another campaign's keys, is refused (TrainerBusy) while
// the holder still runs; a paused campaign still holds it. The lease lives
// beside the trainer's state, so a restarted worker keeps it.

// Lease is the holder of a trainer, in <WorkDir>/lease.json.
type Lease struct {
	Campaign string    `json:"campaign"`
	Since    time.Time `json:"since"`
}

// InitInput is a campaign's configured init, loaded into the trainer under
// the campaign's lease.
type InitInput struct {
	Campaign string `json:"campaign"` // the lease's holder; its trainer keys start with "<campaign>/"
	// Checkpoint is a saved checkpoint to start from; nil: random weights from Seed.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Seed       int         `json:"seed"`
	// Resume: Checkpoint is the campaign's last committed checkpoint and the
	// campaign resumes from it (resumeInit, below).
	Resume bool `json:"resume,omitempty"`
}

func (a *Activities) leasePath() string { return filepath.Join(a.WorkDir, "lease.json") }

// lease reads the current holder; the zero Lease when none.
func (a *Activities) lease() (Lease, error) {
	var l Lease
	b, err := os.ReadFile(a.leasePath())
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, errs.Infraf("trainer lease: %v", err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return Lease{}, nil // a torn write from before a crash: nobody holds it
	}
	return l, nil
}

// acquire gives the trainer to campaign unless another campaign that is
// still running holds it.
func (a *Activities) acquire(ctx context.Context, campaign string) error {
	l, err := a.lease()
	if err != nil {
		return err
	}
	if l.Campaign != "" && l.Campaign != campaign {
		running := true // without a way to ask, assume the holder still runs
		if a.Running != nil {
			if running, err = a.Running(ctx, l.Campaign); err != nil {
				return errs.Infraf("trainer lease: is campaign %s still running? %v", l.Campaign, err)
			}
		}
		if running {
			return busy(a.Name, l)
		}
	}
	b, _ := json.Marshal(Lease{Campaign: campaign, Since: time.Now().UTC()})
	tmp := a.leasePath() + ".tmp"
	if err := os.MkdirAll(a.WorkDir, 0o755); err != nil {
		return errs.Infraf("trainer lease: %v", err)
	}
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return errs.Infraf("trainer lease: %v", err)
	}
	if err := os.Rename(tmp, a.leasePath()); err != nil {
		return errs.Infraf("trainer lease: %v", err)
	}
	return nil
}

// busy is the TrainerBusy error of a trainer that l's campaign holds.
func busy(trainer string, l Lease) error {
	if trainer != "" {
		trainer = " " + trainer
	}
	return errs.TrainerBusyf("the trainer%s is held by campaign %s (since %s): one campaign at a time trains on a trainer; wait for it to end (or cancel it), then retry this campaign",
		trainer, l.Campaign, l.Since.Format(time.RFC3339))
}

// checkLease refuses a training key of a campaign other than the holder's
// (a key is "<campaign>/<epoch>/<stage>..."); with no holder anything trains.
func (a *Activities) checkLease(key string) error {
	l, err := a.lease()
	if err != nil || l.Campaign == "" || strings.HasPrefix(key, l.Campaign+"/") {
		return err
	}
	return errs.TrainerBusyf("trainer key %s: the trainer is held by campaign %s (since %s), whose weights it holds now; this campaign must load its init again (retry it) once that one ends",
		key, l.Campaign, l.Since.Format(time.RFC3339))
}

// TrainerInit takes the trainer's lease for the campaign and replaces the
// trainer's weights with the campaign's init: a stored checkpoint, or random
// weights from a seed; on the hf backend (Model set), the worker's -model
// checkpoint instead: random weights of a pretrained MoE's architecture are
// never what a campaign means. Loading the same init again gives the same weights,
// so a retried call is harmless; the workflow saves and loads it into
// inference next, as the campaign's "init" checkpoint.
func (a *Activities) TrainerInit(ctx context.Context, in InitInput) (Health, error) {
	if in.Campaign == "" {
		return Health{}, errs.BadInputf("trainer init: campaign is required")
	}
	if in.Resume {
		return a.resumeInit(ctx, in)
	}
	if err := a.acquire(ctx, in.Campaign); err != nil {
		return Health{}, err
	}
	if in.Checkpoint != nil {
		return a.TrainerLoad(ctx, *in.Checkpoint)
	}
	var h Health
	var err error
	if a.Model != "" {
		stop := a.alive(ctx, "trainer loading "+a.Model)
		h, err = a.Trainer.Load(ctx, a.Model)
		stop()
	} else {
		h, err = a.Trainer.Init(ctx, in.Seed)
	}
	if err != nil {
		return h, classify(err)
	}
	return h, nil
}

// resumeInit re-takes the lease for a resumed campaign and makes sure the
// trainer holds its weights from the last committed checkpoint on. When the
// lease still names the campaign (no other campaign trained since), the
// trainer's state is this campaign's own latest one: the checkpoint plus any
// step committed after it whose result the closed run never recorded. It is
// kept (Kept: the optimiser state too), so the retry of such a step replays
// its record with its update in the weights. Otherwise the checkpoint is
// loaded; a step committed after it lost its update with the load, so the
// workflow trains under fresh keys from here on (campaign_resume.go).
func (a *Activities) resumeInit(ctx context.Context, in InitInput) (Health, error) {
	if in.Checkpoint == nil {
		return Health{}, errs.BadInputf("trainer init: resume needs the campaign's last checkpoint")
	}
	held, err := a.lease()
	if err != nil {
		return Health{}, err
	}
	if err := a.acquire(ctx, in.Campaign); err != nil {
		return Health{}, err
	}
	if held.Campaign == in.Campaign {
		h, err := a.Trainer.Health(ctx)
		if err != nil {
			return h, classify(err)
		}
		if want, ok := VersionOf(in.Checkpoint.WeightVersion); ok && h.Version >= want {
			h.Kept = true
			return h, nil
		}
	}
	return a.TrainerLoad(ctx, *in.Checkpoint)
}

// VersionOf parses a weight version "v<N>" (N: the trainer's version count).
func VersionOf(wv string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(wv, "v"))
	return n, err == nil && strings.HasPrefix(wv, "v")
}
