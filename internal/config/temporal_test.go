package config

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// isolate clears TEMPORAL_* and points TEMPORAL_CONFIG_FILE at file ("" for
// none), so neither the caller's environment nor ~/.config/temporalio counts.
func isolate(t *testing.T, file string) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TEMPORAL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	if file == "" {
		file = filepath.Join(t.TempDir(), "absent.toml")
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
}

func writeTOML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "temporal.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTemporalDefaultsWithNothingSet(t *testing.T) {
	isolate(t, "")
	tc, err := LoadTemporal()
	if err != nil {
		t.Fatal(err)
	}
	o := tc.Options
	if o.HostPort != "127.0.0.1:7233" || o.Namespace != "default" || o.ConnectionOptions.TLS != nil || o.Credentials != nil {
		t.Fatalf("defaults: %+v", o)
	}
	if Namespace() != "default" || tc.String() != "127.0.0.1:7233 namespace default, plaintext" {
		t.Fatalf("Namespace %q, String %q", Namespace(), tc.String())
	}
}

func TestTemporalAddressAndNamespaceFromEnv(t *testing.T) {
	isolate(t, "")
	t.Setenv("TEMPORAL_ADDRESS", "temporal.internal:7233")
	t.Setenv("TEMPORAL_NAMESPACE", "t1")
	tc, err := LoadTemporal()
	if err != nil {
		t.Fatal(err)
	}
	if tc.Options.HostPort != "temporal.internal:7233" || tc.Options.Namespace != "t1" || tc.Options.ConnectionOptions.TLS != nil {
		t.Fatalf("%+v", tc.Options)
	}
	if Namespace() != "t1" || !strings.Contains(UIURL("eval/x"), "/namespaces/t1/") {
		t.Fatalf("namespace %q, UI %q", Namespace(), UIURL("eval/x"))
	}
}

func TestTemporalProfileAndEnvOverride(t *testing.T) {
	file := writeTOML(t, `
[profile.default]
address = "127.0.0.1:7233"

[profile.prod]
address = "temporal.example.com:7233"
namespace = "rl"
[profile.prod.tls]
server_name = "temporal.example.com"
`)
	isolate(t, file)
	t.Setenv("TEMPORAL_PROFILE", "prod")
	tc, err := LoadTemporal()
	if err != nil {
		t.Fatal(err)
	}
	o := tc.Options
	if o.HostPort != "temporal.example.com:7233" || o.Namespace != "rl" || o.ConnectionOptions.TLS == nil || o.ConnectionOptions.TLS.ServerName != "temporal.example.com" {
		t.Fatalf("profile prod: %+v", o)
	}
	t.Setenv("TEMPORAL_NAMESPACE", "rl-staging")
	if tc, err = LoadTemporal(); err != nil || tc.Options.Namespace != "rl-staging" || tc.Options.HostPort != "temporal.example.com:7233" {
		t.Fatalf("env must override the profile's namespace only: %v %+v", err, tc)
	}
	t.Setenv("TEMPORAL_PROFILE", "nope")
	if _, err := LoadTemporal(); err == nil || !strings.Contains(err.Error(), `profile "nope"`) || !strings.Contains(err.Error(), file) {
		t.Fatalf("a missing profile must be named with its file: %v", err)
	}
}

func TestTemporalUnreadableFilesNameTheSetting(t *testing.T) {
	isolate(t, "")
	missing := filepath.Join(t.TempDir(), "client.pem")
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", missing)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", missing+".key")
	_, err := LoadTemporal()
	if err == nil || !strings.Contains(err.Error(), "TEMPORAL_TLS_CLIENT_CERT_PATH = "+missing+": no such file or directory") {
		t.Fatalf("want the variable and path named: %v", err)
	}

	file := writeTOML(t, "[profile.default.tls]\nserver_ca_cert_path = \"/nonexistent/ca.pem\"\n")
	isolate(t, file)
	_, err = LoadTemporal()
	if err == nil || !strings.Contains(err.Error(), `tls.server_ca_cert_path (profile "default" of `+file+`) = /nonexistent/ca.pem`) {
		t.Fatalf("want the profile key and file named: %v", err)
	}

	bad := writeTOML(t, "not a certificate")
	isolate(t, "")
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", bad)
	if _, err = LoadTemporal(); err == nil || !strings.Contains(err.Error(), "TEMPORAL_TLS_SERVER_CA_CERT_PATH = "+bad) {
		t.Fatalf("an unparsable CA must name its setting: %v", err)
	}
}

func TestTemporalAPIKeyTurnsOnTLS(t *testing.T) {
	isolate(t, "")
	t.Setenv("TEMPORAL_ADDRESS", "us-east-1.aws.api.temporal.io:7233")
	t.Setenv("TEMPORAL_NAMESPACE", "rl.a1b2c")
	t.Setenv("TEMPORAL_API_KEY", "secret")
	tc, err := LoadTemporal()
	if err != nil {
		t.Fatal(err)
	}
	if tc.Options.Credentials == nil || tc.Options.ConnectionOptions.TLS == nil {
		t.Fatalf("an API key needs credentials and TLS: %+v", tc.Options)
	}
	if s := tc.String(); strings.Contains(s, "secret") || !strings.Contains(s, "TLS, API key") {
		t.Fatalf("String must describe, never reveal: %q", s)
	}
}

// fakeFrontend answers GetSystemInfo (all that dialing asks) and records the
// authorization header of every call.
type fakeFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	auth chan string
}

func (f *fakeFrontend) GetSystemInfo(ctx context.Context, _ *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth <- strings.Join(md.Get("authorization"), ",")
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func TestTemporalAPIKeySentAsBearer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &fakeFrontend{auth: make(chan string, 10)}
	workflowservice.RegisterWorkflowServiceServer(srv, f)
	go srv.Serve(l)
	defer srv.Stop()

	isolate(t, "")
	t.Setenv("TEMPORAL_ADDRESS", l.Addr().String())
	t.Setenv("TEMPORAL_API_KEY", "k-123")
	t.Setenv("TEMPORAL_TLS", "false") // the fake speaks plaintext; with TLS the header is the same
	c, err := Dial(context.Background(), slog.LevelError)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := <-f.auth; got != "Bearer k-123" {
		t.Fatalf("authorization = %q, want Bearer k-123", got)
	}
}
