// Package config resolves where t1flow's local state lives and how to reach
// Temporal: flags first, then the environment (and for Temporal, the SDK's
// temporal.toml profiles), then the local defaults.
package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/t1flow/t1flow/internal/store"
)

// Home is the local state directory, $T1FLOW_HOME, else ./.t1flow, as an
// absolute path: it is handed to child processes (trainers, engines, the
// sidecar) that run in other directories, where a relative one would name
// another place.
func Home() string {
	h := os.Getenv("T1FLOW_HOME")
	if h == "" {
		h = ".t1flow"
	}
	if abs, err := filepath.Abs(h); err == nil {
		return abs
	}
	return h // no working directory to resolve it against
}

// StoreDir is the local artifact store: $T1FLOW_STORE, else <home>/store.
func StoreDir() string {
	if s := os.Getenv("T1FLOW_STORE"); s != "" {
		return s
	}
	return filepath.Join(Home(), "store")
}

// OpenStore opens the artifact store: a local directory, or s3://bucket/prefix
// (endpoint from T1FLOW_S3_ENDPOINT, keys from the AWS_* variables).
func OpenStore(where string) (store.Store, error) {
	if strings.HasPrefix(where, "s3://") {
		cfg, err := store.ParseS3URL(where)
		if err != nil {
			return nil, err
		}
		return store.NewS3(cfg)
	}
	return store.NewLocal(where)
}

// UIURL links a workflow in the Temporal UI ($T1FLOW_UI, default http://localhost:8233).
func UIURL(workflowID string) string {
	ui := os.Getenv("T1FLOW_UI")
	if ui == "" {
		ui = "http://localhost:8233"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", ui, url.PathEscape(Namespace()), url.PathEscape(workflowID))
}
