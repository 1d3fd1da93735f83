package harborout

import (
	"context"
	_ "embed" // harbor_check.py
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

//go:embed harbor_check.py
var checkPy string

// CheckReport is what Harbor read from a job directory (harbor_check.py).
type CheckReport struct {
	NTotalTrials int                     `json:"n_total_trials"`
	Trials       map[string]CheckedTrial `json:"trials"`
	// Metrics (Harbor's Mean: {"mean": x}, or one mean per reward key when
	// the reward files name several) and PassAtK by evals key
	// (agent__dataset).
	Metrics        map[string]map[string]float64 `json:"metrics"`
	PassAtK        map[string]map[string]float64 `json:"pass_at_k"`
	NErroredTrials int                           `json:"n_errored_trials"`
}

// CheckedTrial is one trial as Harbor read it.
type CheckedTrial struct {
	Reward        *float64           `json:"reward"`
	Rewards       map[string]float64 `json:"rewards"`
	RewardValid   bool               `json:"reward_valid"`
	ExceptionType *string            `json:"exception_type"`
	Steps         int                `json:"steps"`
}

// Check loads the job directory dir with harbor's own models under python
// (an interpreter with harbor installed) and returns what Harbor read, or
// the file and field Harbor rejects.
func Check(ctx context.Context, python, dir string) (CheckReport, error) {
	cmd := exec.CommandContext(ctx, python, "-c", checkPy, dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep CheckReport
	if err != nil {
		return rep, fmt.Errorf("%s: %v: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("harbor check printed %q: %v", out, err)
	}
	return rep, nil
}
