package task

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// AgentDeadlineSec is the agent phase's time limit: agent.timeout_sec, or,
// when the task gives none (Harbor's default), MaxTimeoutSec.
func (c Config) AgentDeadlineSec() float64 {
	if c.AgentTimeoutSec > 0 {
		return c.AgentTimeoutSec
	}
	return MaxTimeoutSec
}

// size reads a size in MB from key (a number), or from Harbor's legacy
// legacy key ("4G", "512M", "1024K"); both given must agree.
func (p *parser) size(legacy, key string, def int64, lo, hi float64) int64 {
	mb := int64(p.num(key, float64(def), lo, hi))
	s, ok := typed[string](p, legacy, `a size such as "4G" or "512M"`)
	if !ok {
		return mb
	}
	n, err := parseSizeMB(s)
	if err != nil {
		p.fail(legacy, fmt.Sprintf("= %q: %v", s, err))
		return mb
	}
	if _, both := p.lookup(key); both && n != mb {
		p.fail(legacy, fmt.Sprintf("= %q (%d MB) disagrees with %s = %d: give one", s, n, key, mb))
		return mb
	}
	if float64(n) < lo || float64(n) > hi {
		p.fail(legacy, fmt.Sprintf("= %q (%d MB) must be between %s and %s MB", s, n, fmtNum(lo), fmtNum(hi)))
		return mb
	}
	return n
}

// parseSizeMB reads Harbor's sizes: a number with a G, M or K suffix
// (binary units, so "4G" is 4096 MB).
func parseSizeMB(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := map[string]float64{"G": 1024, "M": 1, "K": 1.0 / 1024}
	for suf, m := range mult {
		if num, ok := strings.CutSuffix(u, suf); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f < 0 {
				break
			}
			return int64(f * m), nil
		}
	}
	return 0, fmt.Errorf("expected a size such as \"4G\", \"512M\" or \"1024K\"")
}

func (p *parser) absPath(key string) string {
	s := p.str(key, "")
	if s != "" && !path.IsAbs(s) {
		p.fail(key, fmt.Sprintf("= %q must be an absolute path", s))
		return ""
	}
	return s
}

// user reads a username or UID (Harbor accepts both).
func (p *parser) user(key string) string {
	v, ok := p.lookup(key)
	if !ok {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case int64:
		if x >= 0 {
			return strconv.FormatInt(x, 10)
		}
	}
	p.fail(key, fmt.Sprintf("= %v must be a username or a UID", v))
	return ""
}

// linux accepts environment.os = "linux" (any case), Harbor's default.
func (p *parser) linux(key string) {
	if s := p.str(key, "linux"); !strings.EqualFold(s, "linux") {
		p.fail(key, fmt.Sprintf("= %q: t1flow runs Linux sandboxes only (Harbor's windows containers need a Windows host)", s))
	}
}
