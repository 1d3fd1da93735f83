package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
)

// PKI is a test certificate authority with a server and a client certificate
// it signed, as PEM files under a test directory.
type PKI struct {
	ServerName                    string
	CAFile, ServerCert, ServerKey string
	ClientCert, ClientKey         string
	ca                            *x509.Certificate
	caKey                         *ecdsa.PrivateKey
	pool                          *x509.CertPool
	server                        tls.Certificate
	dir                           string
}

// NewPKI makes a fresh CA and, signed by it, a server certificate for
// serverName (and 127.0.0.1) and a client certificate.
func NewPKI(tb testing.TB, serverName string) *PKI {
	tb.Helper()
	p := &PKI{ServerName: serverName, dir: tb.TempDir()}
	var err error
	if p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		tb.Fatal(err)
	}
	tmpl := certTemplate("t1flow test CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		tb.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		tb.Fatal(err)
	}
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.CAFile = p.write(tb, "ca.pem", "CERTIFICATE", der)
	p.ServerCert, p.ServerKey = p.issue(tb, "server", x509.ExtKeyUsageServerAuth, serverName)
	p.ClientCert, p.ClientKey = p.issue(tb, "client", x509.ExtKeyUsageClientAuth, "")
	if p.server, err = tls.LoadX509KeyPair(p.ServerCert, p.ServerKey); err != nil {
		tb.Fatal(err)
	}
	return p
}

func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

// issue signs a leaf certificate and writes it and its key.
func (p *PKI) issue(tb testing.TB, name string, usage x509.ExtKeyUsage, dnsName string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := certTemplate("t1flow test " + name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if dnsName != "" {
		tmpl.DNSNames = []string{dnsName}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return p.write(tb, name+".pem", "CERTIFICATE", der), p.write(tb, name+".key", "EC PRIVATE KEY", keyDER)
}

func (p *PKI) write(tb testing.TB, name, typ string, der []byte) string {
	tb.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// MTLSProxy puts a TLS front end that requires a client certificate signed by
// p's CA before backend (a plaintext gRPC server on loopback), as a production
// cluster's front end does: it terminates TLS, offers HTTP/2 by ALPN as gRPC
// clients insist, and forwards the raw bytes. It returns its address.
func MTLSProxy(tb testing.TB, p *PKI, backend string) string {
	tb.Helper()
	cfg := &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer track(c, false)
				forward(c.(*tls.Conn), backend)
			}()
		}
	}()
	tb.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// forward completes the handshake (a client without a valid certificate stops
// here) and copies bytes both ways until either side closes.
func forward(c *tls.Conn, backend string) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return
	}
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(b, c); b.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, b); c.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// BareDevServer starts a dev server of the test's own on loopback with no
// t1flow search attributes registered (as a fresh production cluster has
// none), stopped when the test ends. It returns the server's address.
func BareDevServer(tb testing.TB) string {
	tb.Helper()
	bin := temporalBin(tb)
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort())
	dev, err := testsuite.StartDevServer(context.Background(), testsuite.DevServerOptions{
		ExistingPath:  bin,
		ClientOptions: &client.Options{HostPort: addr, Namespace: "default", Logger: quietLogger{}},
		LogLevel:      "error",
		Stdout:        os.Stderr, Stderr: os.Stderr,
	})
	if err != nil {
		tb.Fatalf("start the Temporal dev server: %v", err)
	}
	tb.Cleanup(func() { dev.Stop() })
	return addr
}

// ClearTemporalEnv unsets every TEMPORAL_* variable for the test (restored
// after it), so connection settings come only from what the test sets.
// The SDK's envconfig treats a variable set to "" as set, so they are unset.
func ClearTemporalEnv(tb testing.TB) {
	tb.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TEMPORAL_") {
			tb.Setenv(k, "")
			if err := os.Unsetenv(k); err != nil {
				tb.Fatalf("unset %s: %v", k, err)
			}
		}
	}
}
