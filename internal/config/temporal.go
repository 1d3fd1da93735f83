package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
)

// Where t1flow looks for Temporal when neither a profile nor TEMPORAL_* names it:
// the dev server that `make dev` starts.
const (
	DefaultAddress   = "127.0.0.1:7233"
	DefaultNamespace = "default"
)

// Temporal is how t1flow reaches Temporal. The SDK's environment configuration
// (go.temporal.io/sdk/contrib/envconfig) resolves it: a profile of temporal.toml
// ($TEMPORAL_CONFIG_FILE, else the user config dir's temporalio/temporal.toml;
// profile $TEMPORAL_PROFILE, else "default"), overridden by TEMPORAL_* variables.
// The file and profile are kept so an error can name the setting at fault.
type Temporal struct {
	Options    client.Options
	ConfigFile string // the temporal.toml consulted (it may not exist)
	Profile    string // the profile name used
	profile    envconfig.ClientConfigProfile
}

// LoadTemporal resolves the connection settings from temporal.toml and the
// environment, checks that every file they name can be read, and fills in the
// local defaults.
func LoadTemporal() (*Temporal, error) {
	t, err := loadProfile()
	if err != nil {
		return nil, err
	}
	if err := t.checkFiles(); err != nil {
		return nil, err
	}
	opts, err := t.profile.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return nil, fmt.Errorf("temporal settings (%s): %w", t.tlsSettings(), err)
	}
	if opts.HostPort == "" {
		opts.HostPort = DefaultAddress
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	t.Options = opts
	return t, nil
}

func loadProfile() (*Temporal, error) {
	t := &Temporal{ConfigFile: os.Getenv("TEMPORAL_CONFIG_FILE"), Profile: os.Getenv("TEMPORAL_PROFILE")}
	if t.ConfigFile == "" {
		t.ConfigFile = envconfig.DefaultConfigFilePath()
	}
	if t.Profile == "" {
		t.Profile = envconfig.DefaultConfigFileProfile
	}
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{})
	if err != nil {
		return nil, fmt.Errorf("temporal settings: profile %q of %s (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE): %w", t.Profile, t.ConfigFile, err)
	}
	t.profile = prof
	return t, nil
}

// Namespace is the namespace t1flow uses: TEMPORAL_NAMESPACE, else the profile's, else "default".
func Namespace() string {
	if t, err := loadProfile(); err == nil && t.profile.Namespace != "" {
		return t.profile.Namespace
	}
	return DefaultNamespace
}

// setting names where a value came from: its TEMPORAL_* variable when that is
// set (the variable wins), else the profile key in temporal.toml.
func (t *Temporal) setting(env, key string) string {
	if _, ok := os.LookupEnv(env); ok {
		return env
	}
	return fmt.Sprintf("%s (profile %q of %s)", key, t.Profile, t.ConfigFile)
}

// checkFiles reads every file the TLS settings name, so that an unreadable one
// is reported with the setting that named it rather than as a TLS failure.
func (t *Temporal) checkFiles() error {
	c := t.profile.TLS
	if c == nil || c.Disabled {
		return nil
	}
	files := []struct{ what, env, key, path string }{
		{"client certificate", "TEMPORAL_TLS_CLIENT_CERT_PATH", "tls.client_cert_path", c.ClientCertPath},
		{"client key", "TEMPORAL_TLS_CLIENT_KEY_PATH", "tls.client_key_path", c.ClientKeyPath},
		{"server CA certificate", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "tls.server_ca_cert_path", c.ServerCACertPath},
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Errorf("temporal %s: %s = %s: %v", f.what, t.setting(f.env, f.key), f.path, err)
		}
	}
	return nil
}

// tlsSettings lists the TLS settings in play, each with the variable or key that set it.
func (t *Temporal) tlsSettings() string {
	c := t.profile.TLS
	if c == nil {
		return "no TLS settings"
	}
	var parts []string
	add := func(env, key, val string) {
		if val != "" {
			parts = append(parts, fmt.Sprintf("%s = %s", t.setting(env, key), val))
		}
	}
	add("TEMPORAL_TLS_CLIENT_CERT_PATH", "tls.client_cert_path", c.ClientCertPath)
	add("TEMPORAL_TLS_CLIENT_KEY_PATH", "tls.client_key_path", c.ClientKeyPath)
	add("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "tls.server_ca_cert_path", c.ServerCACertPath)
	add("TEMPORAL_TLS_SERVER_NAME", "tls.server_name", c.ServerName)
	if len(c.ClientCertData) > 0 {
		parts = append(parts, "client certificate data ("+t.setting("TEMPORAL_TLS_CLIENT_CERT_DATA", "tls.client_cert_data")+")")
	}
	if len(c.ServerCACertData) > 0 {
		parts = append(parts, "server CA data ("+t.setting("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "tls.server_ca_cert_data")+")")
	}
	if len(parts) == 0 {
		return "TLS with system roots"
	}
	return strings.Join(parts, ", ")
}

// String says where and how t1flow connects, never the secrets.
func (t *Temporal) String() string {
	o := t.Options
	s := fmt.Sprintf("%s namespace %s", o.HostPort, o.Namespace)
	switch {
	case o.ConnectionOptions.TLS == nil:
		s += ", plaintext"
	case len(o.ConnectionOptions.TLS.Certificates) > 0:
		s += ", mTLS"
	default:
		s += ", TLS"
	}
	if o.Credentials != nil {
		s += ", API key"
	}
	return s
}

// Dial connects to Temporal as LoadTemporal resolves it. Errors name the
// address, namespace and TLS settings, and say which setting to look at.
func Dial(ctx context.Context, logLevel slog.Level, interceptors ...interceptor.ClientInterceptor) (client.Client, error) {
	t, err := LoadTemporal()
	if err != nil {
		return nil, err
	}
	return t.Dial(ctx, logLevel, interceptors...)
}

// Dial connects with these settings.
func (t *Temporal) Dial(ctx context.Context, logLevel slog.Level, interceptors ...interceptor.ClientInterceptor) (client.Client, error) {
	opts := t.Options
	opts.Logger = tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel})))
	opts.Interceptors = interceptors
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("temporal at %s: %w%s", t, err, t.hint(err))
	}
	return c, nil
}

// hint says which setting to look at for the usual ways a connection fails.
func (t *Temporal) hint(err error) string {
	msg := strings.ToLower(err.Error())
	o := t.Options
	tlsOn := o.ConnectionOptions.TLS != nil
	clientCert := tlsOn && len(o.ConnectionOptions.TLS.Certificates) > 0
	// A TLS server that refuses the client's certificate (or its absence) may
	// close the connection before its alert is read: the client sees only a
	// broken pipe or a reset, so those count as refusals under TLS too.
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return "; the server's certificate is not signed by a CA this client trusts: set " +
			t.setting("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "tls.server_ca_cert_path") + " to the CA that signed it"
	case strings.Contains(msg, "certificate is valid for"):
		return "; set " + t.setting("TEMPORAL_TLS_SERVER_NAME", "tls.server_name") + " to a name in the server's certificate"
	case tlsOn && !clientCert && (strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate") || strings.Contains(msg, "handshake failure") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset")):
		return "; the server requires a client certificate (mTLS): set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH " +
			"(profile keys tls.client_cert_path, tls.client_key_path)"
	case clientCert && (strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "bad certificate") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset")):
		return "; the server refused the client certificate " + t.setting("TEMPORAL_TLS_CLIENT_CERT_PATH", "tls.client_cert_path") +
			" = " + t.profile.TLS.ClientCertPath + ": use one signed by a CA the server accepts"
	case strings.Contains(msg, "first record does not look like a tls handshake"):
		return "; the server does not speak TLS: remove the TLS settings or set TEMPORAL_TLS=false"
	case !tlsOn && (strings.Contains(msg, "connection reset") || strings.Contains(msg, "eof") || strings.Contains(msg, "frame too large")):
		return "; if the server requires TLS, set TEMPORAL_TLS=true or the TEMPORAL_TLS_* settings (docs/production.md)"
	case strings.Contains(msg, "unauthenticated") || strings.Contains(msg, "permissiondenied") || strings.Contains(msg, "permission denied"):
		return "; check " + t.setting("TEMPORAL_API_KEY", "api_key") + " or the client certificate, and that namespace " + o.Namespace + " is the one they grant"
	case o.HostPort == DefaultAddress && !tlsOn:
		return " (start it with `make dev`)"
	}
	return ""
}
