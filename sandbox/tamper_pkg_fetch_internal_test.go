package sandbox

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A package the agent names in the sandbox's dpkg status that no mirror has
// is the agent's (a tamper finding), not the host's (an infra failure the
// agent could cause at will, for an unscored retry); a mirror that does not
// answer, or answers 5xx, is the host's.
func TestDebFetchTellsAbsentFromUnreachable(t *testing.T) {
	p := debPackage{Name: "libnss-evil", Arch: "amd64", Version: "9.9-1", Source: "evil"}
	for _, c := range []struct {
		name   string
		status int
		absent bool
	}{{"404", http.StatusNotFound, true}, {"410", http.StatusGone, true}, {"503", http.StatusServiceUnavailable, false}} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(c.status) }))
			defer srv.Close()
			_, err := (&DebCache{Dir: t.TempDir(), Mirrors: []string{srv.URL}}).fetch(context.Background(), p)
			if err == nil || errors.Is(err, errDebAbsent) != c.absent {
				t.Fatalf("mirror answering %d: err %v, absent %v; want absent %v", c.status, err, errors.Is(err, errDebAbsent), c.absent)
			}
		})
	}
	t.Run("one mirror down", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
		defer srv.Close()
		down := httptest.NewServer(http.NotFoundHandler())
		down.Close()
		_, err := (&DebCache{Dir: t.TempDir(), Mirrors: []string{srv.URL, down.URL}}).fetch(context.Background(), p)
		if err == nil || errors.Is(err, errDebAbsent) {
			t.Fatalf("one mirror 404, one unreachable: err %v is absent; the unreachable one might have it", err)
		}
	})
}

func TestValidDebRefusesPathsInTheAgentsFields(t *testing.T) {
	good := []debPackage{
		{Name: "libc6", Arch: "amd64", Version: "2.36-9+deb12u10", Source: "glibc"},
		{Name: "libnss-systemd", Arch: "amd64", Version: "252.30-1~deb12u2", Source: "systemd"},
		{Name: "tzdata", Arch: "all", Version: "2:2025b-0+deb12u1"},
	}
	bad := []debPackage{
		{Name: "libc6", Arch: "amd64", Version: "1/../../../../tmp/x"},
		{Name: "../x", Arch: "amd64", Version: "1"},
		{Name: "libc6", Arch: "amd64/..", Version: "1"},
		{Name: "libc6", Arch: "amd64", Version: "1", Source: "a/b"},
		{Name: "", Arch: "amd64", Version: "1"},
	}
	for _, p := range good {
		if !validDeb(p) {
			t.Errorf("refused %+v", p)
		}
	}
	for _, p := range bad {
		if validDeb(p) {
			t.Errorf("accepted %+v", p)
		}
	}
}
