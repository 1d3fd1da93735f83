package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
)

// mtlsCluster is a dev server behind a front end that requires a client
// certificate signed by the test CA, and a temporal.toml with profiles for it.
type mtlsCluster struct {
	pki, other *testenv.PKI
	addr, toml string
}

func startMTLSCluster(t *testing.T) *mtlsCluster {
	t.Helper()
	backend := testenv.BareDevServer(t)
	m := &mtlsCluster{pki: testenv.NewPKI(t, "temporal.t1flow.test"), other: testenv.NewPKI(t, "temporal.t1flow.test")}
	m.addr = testenv.MTLSProxy(t, m.pki, backend)
	profile := func(name, ca, cert, key string) string {
		s := fmt.Sprintf("[profile.%s]\naddress = %q\nnamespace = \"default\"\n[profile.%s.tls]\nserver_ca_cert_path = %q\nserver_name = %q\n",
			name, m.addr, name, ca, m.pki.ServerName)
		if cert != "" {
			s += fmt.Sprintf("client_cert_path = %q\nclient_key_path = %q\n", cert, key)
		}
		return s
	}
	m.toml = filepath.Join(t.TempDir(), "temporal.toml")
	body := profile("prod", m.pki.CAFile, m.pki.ClientCert, m.pki.ClientKey) +
		profile("nocert", m.pki.CAFile, "", "") +
		profile("wrongca", m.other.CAFile, m.pki.ClientCert, m.pki.ClientKey) +
		profile("untrusted", m.pki.CAFile, m.other.ClientCert, m.other.ClientKey)
	if err := os.WriteFile(m.toml, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.ClearTemporalEnv(t)
	t.Setenv("TEMPORAL_CONFIG_FILE", m.toml)
	return m
}

// TestMTLSCluster runs against a dev server that only a client certificate
// signed by the test CA can reach. Each misconfiguration fails at dial time
// naming the setting to fix; with the profile's CA, client certificate and
// server name, `starter setup` registers the search attributes, a worker and a
// client dialed as t1flow's run a workflow that carries them, and `starter
// campaign list` reads the visibility store; the same settings as TEMPORAL_*
// variables work too.
func TestMTLSCluster(t *testing.T) {
	m := startMTLSCluster(t)
	t.Run("refusals", func(t *testing.T) { mtlsRefusals(t) })
	t.Run("setup and round trip", func(t *testing.T) { mtlsSetupAndRoundTrip(t, m) })
	t.Run("env variables", func(t *testing.T) {
		t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "absent.toml"))
		t.Setenv("TEMPORAL_ADDRESS", m.addr)
		t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", m.pki.CAFile)
		t.Setenv("TEMPORAL_TLS_SERVER_NAME", m.pki.ServerName)
		t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", m.pki.ClientCert)
		t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", m.pki.ClientKey)
		code, out, _, err := starter(t, "setup")
		if code != 0 || err != nil || !strings.Contains(out, "nothing to do") {
			t.Fatalf("setup with TEMPORAL_TLS_*: %d %v\n%s", code, err, out)
		}
	})
}

func mtlsSetupAndRoundTrip(t *testing.T, m *mtlsCluster) {
	t.Setenv("TEMPORAL_PROFILE", "prod")
	code, out, _, err := starter(t, "setup")
	if code != 0 || err != nil || !strings.Contains(out, "registered on namespace default: CampaignID=Keyword") || !strings.Contains(out, "mTLS") {
		t.Fatalf("setup: %d %v\n%s", code, err, out)
	}
	code, out, _, err = starter(t, "setup")
	if code != 0 || err != nil || !strings.Contains(out, "nothing to do") {
		t.Fatalf("setup again: %d %v\n%s", code, err, out)
	}

	ctx := context.Background()
	c, err := config.Dial(ctx, slog.LevelError)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sa, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ids.SearchAttributeFlags {
		name, typ, _ := strings.Cut(f, "=")
		want, _ := enumspb.IndexedValueTypeFromString(typ)
		if got := sa.CustomAttributes[name]; got != want {
			t.Errorf("search attribute %s = %v, want %v", name, got, want)
		}
	}

	roundTrip(t, c)
	code, out, _, err = starter(t, "campaign", "list")
	if code != 0 || err != nil || !strings.Contains(out, "CAMPAIGN") {
		t.Fatalf("campaign list over mTLS: %d %v\n%s", code, err, out)
	}
}

func echo(ctx workflow.Context, s string) (string, error) { return "echo " + s, nil }

// roundTrip starts a workflow with t1flow's search attributes (the start fails
// if they are not registered) and waits for a worker to finish it.
func roundTrip(t *testing.T, c client.Client) {
	t.Helper()
	wc, err := config.Dial(context.Background(), slog.LevelError) // a second connection, as a worker host makes
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	queue := testenv.HostName("mtls")
	w := worker.New(wc, queue, worker.Options{})
	w.RegisterWorkflow(echo)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: "mtls/" + queue, TaskQueue: queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(ids.TaskID.ValueSet("mtls-task"), ids.Reward.ValueSet(0.5)),
	}, echo, "hi")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "echo hi" {
		t.Fatalf("round trip: %q %v", got, err)
	}
}

func mtlsRefusals(t *testing.T) {
	cases := []struct{ profile, want string }{
		{"nocert", "the server requires a client certificate (mTLS): set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"},
		{"wrongca", "not signed by a CA this client trusts: set tls.server_ca_cert_path"},
		{"untrusted", "the server refused the client certificate tls.client_cert_path (profile \"untrusted\""},
	}
	for _, tc := range cases {
		t.Run(tc.profile, func(t *testing.T) {
			t.Setenv("TEMPORAL_PROFILE", tc.profile)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			code, out, _, err := func() (int, string, string, error) {
				var o, e strings.Builder
				code, err := run(ctx, []string{"setup"}, &o, &e)
				return code, o.String(), e.String(), err
			}()
			if code == 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want exit != 0 and %q, got %d after %s:\n%v\n%s", tc.want, code, time.Since(start).Round(time.Millisecond), err, out)
			}
			t.Logf("%s: %v (%s)", tc.profile, err, time.Since(start).Round(time.Millisecond))
		})
	}
}
