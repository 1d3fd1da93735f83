package activities

import (
	"context"
	"strings"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
)

// AuditLeakSeen reads what the audit's leak seeker reported in its rollout
// (the record's turn output): one "leak: FILE holds VALUE, written to PATH"
// line per value it found in the image and wrote where the tests look.
func (a *Activities) AuditLeakSeen(ctx context.Context, record store.Ref) ([]string, error) {
	var rec struct {
		Turns []struct {
			Preview string     `json:"preview"`
			Output  *store.Ref `json:"output"`
		} `json:"turns"`
	}
	if err := store.GetJSON(ctx, a.Store, record, &rec); err != nil {
		return nil, errs.Infraf("read the leak seeker's record %s: %v", record.URI, err)
	}
	var out []string
	for _, t := range rec.Turns {
		text := t.Preview
		if t.Output != nil {
			b, err := a.Store.Get(ctx, *t.Output)
			if err != nil {
				return nil, errs.Infraf("read the leak seeker's output %s: %v", t.Output.URI, err)
			}
			text = string(b)
		}
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "leak: ") && len(out) < 20 {
				out = append(out, strings.TrimPrefix(l, "leak: "))
			}
		}
	}
	return out, nil
}
