package workflows

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// A starter that starts a workflow by its function sends the function's name,
// so a registered name that drifts from it would leave that start unserved.
func TestRegisteredNamesAreFunctionNames(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range All {
		full := runtime.FuncForPC(reflect.ValueOf(w.Fn).Pointer()).Name()
		if fn := full[strings.LastIndex(full, ".")+1:]; fn != w.Name {
			t.Errorf("%s is registered as %q; starters that pass the function send %q", full, w.Name, fn)
		}
		if seen[w.Name] {
			t.Errorf("%q is listed twice", w.Name)
		}
		seen[w.Name] = true
	}
}
