package harborout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// unsafeName is what a trial name may not hold: it names a directory.
var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// TrialName is a trial's directory name, Harbor's <task>__<suffix> with
// anything a path cannot hold replaced.
func TrialName(task, suffix string) string {
	return unsafeName.ReplaceAllString(task, "-") + "__" + unsafeName.ReplaceAllString(suffix, "-")
}

// Write lays out j in dir as Harbor lays out a job directory:
// dir/result.json, and per trial dir/<trial>/result.json,
// dir/<trial>/agent/trajectory.json and, for a verified trial,
// dir/<trial>/verifier/reward.txt and test-stdout.txt. dir must be new or empty, so that no
// trial of an earlier export is mistaken for one of this.
func Write(dir string, j Job) error {
	if err := emptyDir(dir); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range j.Trials {
		if t.Name == "" || unsafeName.MatchString(t.Name) || seen[t.Name] {
			return fmt.Errorf("harbor export: trial name %q is empty, not a plain directory name, or given twice", t.Name)
		}
		seen[t.Name] = true
		td := filepath.Join(abs, t.Name)
		uri := "file://" + td
		if err := writeJSON(filepath.Join(td, "result.json"), NewTrialResult(t, j.ID, uri, j.StartedAt)); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(td, "agent", "trajectory.json"), NewTrajectory(t, j.ID)); err != nil {
			return err
		}
		if err := writeVerifier(filepath.Join(td, "verifier"), t); err != nil {
			return err
		}
	}
	return writeJSON(filepath.Join(abs, "result.json"), NewJobResult(j))
}

func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return fmt.Errorf("--dir %s: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("--dir %s is not empty: give a new directory (an export never mixes with an earlier one)", dir)
	}
	return nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeVerifier writes what Harbor keeps of the verifier: reward.json (the
// named rewards) or reward.txt (the reward), and test-stdout.txt, for a
// trial that has them.
func writeVerifier(dir string, t Trial) error {
	if t.RewardDict() == nil && t.VerifierOutput == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(t.Rewards) > 0 {
		b, err := json.Marshal(t.Rewards)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "reward.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
	} else if t.Reward != nil {
		if err := os.WriteFile(filepath.Join(dir, "reward.txt"), []byte(strconv.FormatFloat(*t.Reward, 'g', -1, 64)+"\n"), 0o644); err != nil {
			return err
		}
	}
	if t.VerifierOutput != "" {
		return os.WriteFile(filepath.Join(dir, "test-stdout.txt"), []byte(t.VerifierOutput), 0o644)
	}
	return nil
}
