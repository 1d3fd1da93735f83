package gpu

import (
	"context"

	"github.com/t1flow/t1flow/internal/ids"
)

// A trainer holds one campaign's weights and key journal, so a campaign's
// trainer calls must all reach the same trainer. Each GPU worker serves the
// shared queue (ids.GPUQueue) and its trainer's own (ids.TrainerQueue): a
// campaign claims a trainer once on the shared queue (TrainerClaim, whichever
// worker takes it) and sends every later call to that trainer's queue.

// TrainerRef names the trainer a campaign is pinned to and its queue.
type TrainerRef struct {
	Name  string `json:"name"`
	Queue string `json:"queue"`
}

// TrainerClaim answers which trainer took the call, for the campaign to pin
// itself to. It takes no lease (TrainerInit does, on the trainer's queue),
// but refuses a trainer another running campaign holds (TrainerBusy), so a
// campaign is not pinned to a trainer it cannot have.
func (a *Activities) TrainerClaim(ctx context.Context, campaign string) (TrainerRef, error) {
	l, err := a.lease()
	if err != nil {
		return TrainerRef{}, err
	}
	if l.Campaign != "" && l.Campaign != campaign {
		running := true
		if a.Running != nil {
			if running, err = a.Running(ctx, l.Campaign); err != nil {
				return TrainerRef{}, err
			}
		}
		if running {
			return TrainerRef{}, busy(a.Name, l)
		}
	}
	if a.Name == "" {
		return TrainerRef{}, nil // an unnamed trainer: the campaign stays on the shared queue
	}
	return TrainerRef{Name: a.Name, Queue: ids.TrainerQueue(a.Name)}, nil
}
