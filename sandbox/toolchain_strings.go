package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// toolchainPatchStrings applies toolchainStringPatches to the ELF objects
// (paths under out) they name.
func toolchainPatchStrings(out string, objects []string) error {
	found := make([]bool, len(toolchainStringPatches))
	for i, sp := range toolchainStringPatches {
		if len(sp.Old) != len(sp.New) || sp.Old == "" {
			return fmt.Errorf("string patch %q in %s: replacement length differs", sp.Old, sp.File)
		}
		if sp.File != "" && sp.Required {
			if _, err := os.Stat(filepath.Join(out, filepath.FromSlash(sp.File))); err != nil {
				return fmt.Errorf("string patch %d: %w", i, err)
			}
		}
	}
	for _, p := range objects {
		rel, err := filepath.Rel(out, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		var b []byte
		changed := false
		for i, sp := range toolchainStringPatches {
			if sp.File != "" && sp.File != rel {
				continue
			}
			if b == nil {
				if b, err = os.ReadFile(p); err != nil {
					return err
				}
			}
			if !bytes.Contains(b, []byte(sp.Old)) {
				continue
			}
			found[i], changed = true, true
			b = bytes.ReplaceAll(b, []byte(sp.Old), []byte(sp.New))
		}
		if changed {
			info, err := os.Stat(p)
			if err != nil {
				return err
			}
			os.Chmod(p, info.Mode().Perm()|0o200)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				return err
			}
			if err := os.Chmod(p, info.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	for i, sp := range toolchainStringPatches {
		if sp.Required && !found[i] {
			return fmt.Errorf("%s has no %q to blind", sp.File, strings.TrimRight(sp.Old, "\x00"))
		}
	}
	return nil
}
