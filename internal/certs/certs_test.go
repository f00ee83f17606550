package certs

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fixture/testca"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// echo serves src's TLS on loopback, echoing lines, until the test ends.
func echo(t *testing.T, src *Source) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects with a client trusting roots (and presenting cert, if any)
// and returns the connection and the server certificate's serial.
func dial(t *testing.T, addr string, roots *x509.CertPool, cert *tls.Certificate) (*tls.Conn, *big.Int, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	// A TLS 1.3 server refuses a client certificate after the handshake:
	// one round trip shows it.
	if _, err := c.Write([]byte("ping\n")); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// TestSelfSigned: with no files the server has a certificate for loopback
// that a client trusting it verifies, and HTTP/2 is offered.
func TestSelfSigned(t *testing.T) {
	src, err := New(Config{}, logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(src.state.Load().cert.Leaf)
	c, _, err := dial(t, echo(t, src), roots, nil)
	if err != nil {
		t.Fatalf("a client trusting the self-signed certificate: %v", err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("negotiated %q, want h2 (gRPC)", p)
	}
	if !src.SelfSigned() {
		t.Error("SelfSigned() = false")
	}
}

// TestSelfSignedRenewed: once two thirds of its validity passed, the next
// handshake gets a new certificate.
func TestSelfSignedRenewed(t *testing.T) {
	reg := prometheus.NewRegistry()
	src, err := New(Config{Validity: time.Hour}, logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	first := src.state.Load()
	now := time.Now()
	if st, _ := src.current(now.Add(30 * time.Minute)); st != first {
		t.Error("renewed at half its validity, want the same certificate until two thirds")
	}
	st, err := src.current(now.Add(41 * time.Minute))
	if err != nil || st == first || !st.notAfter.After(first.notAfter) {
		t.Errorf("current at 41 of 60 minutes = %v, %v, want a renewed certificate", st, err)
	}
	if got := testutil.ToFloat64(src.metrics.reloads.WithLabelValues("renewed")); got != 1 {
		t.Errorf("reloads{renewed} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(src.metrics.expiry); got != float64(st.notAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want %v", got, st.notAfter.Unix())
	}
}

// TestFilesReloaded: changed files serve the next handshake; a connection
// open across the change keeps working; a broken change keeps the last good
// certificate.
func TestFilesReloaded(t *testing.T) {
	auth := testca.New(t)
	roots := auth.Pool()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := auth.Issue(t, 100, x509.ExtKeyUsageServerAuth)
	write(t, certFile, c1)
	write(t, keyFile, k1)
	src, err := New(Config{CertFile: certFile, KeyFile: keyFile}, logger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	addr := echo(t, src)
	open, serial, err := dial(t, addr, roots, nil)
	if err != nil || serial.Int64() != 100 {
		t.Fatalf("first handshake: serial %v, %v, want 100", serial, err)
	}
	if src.Reload() {
		t.Error("Reload() of unchanged files = true")
	}
	c2, k2 := auth.Issue(t, 200, x509.ExtKeyUsageServerAuth)
	write(t, certFile, c2)
	write(t, keyFile, k2)
	if !src.Reload() {
		t.Fatal("Reload() of changed files = false")
	}
	if _, serial, err := dial(t, addr, roots, nil); err != nil || serial.Int64() != 200 {
		t.Errorf("handshake after the change: serial %v, %v, want 200", serial, err)
	}
	if _, err := open.Write([]byte("still there\n")); err != nil {
		t.Fatalf("the connection open across the change: %v", err)
	}
	if line, err := bufio.NewReader(open).ReadString('\n'); err != nil || line != "still there\n" {
		t.Errorf("the connection open across the change read %q, %v", line, err)
	}
	write(t, certFile, []byte("not a certificate"))
	if src.Reload() {
		t.Error("Reload() of a broken certificate = true")
	}
	if _, serial, err := dial(t, addr, roots, nil); err != nil || serial.Int64() != 200 {
		t.Errorf("handshake after a broken change: serial %v, %v, want the last good one, 200", serial, err)
	}
	if got := testutil.ToFloat64(src.metrics.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("reloads{error} = %v, want 1", got)
	}
}

// TestMutualTLS: with a client CA file, a client without a certificate, or
// with one from another CA, is refused; one the CA signed gets through.
func TestMutualTLS(t *testing.T) {
	clients, other := testca.New(t), testca.New(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	write(t, caFile, clients.PEM)
	src, err := New(Config{ClientCAFile: caFile}, logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(src.state.Load().cert.Leaf)
	addr := echo(t, src)
	pair := func(a *testca.CA) *tls.Certificate {
		c, k := a.Issue(t, 7, x509.ExtKeyUsageClientAuth)
		cert, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return &cert
	}
	if _, _, err := dial(t, addr, roots, nil); err == nil {
		t.Error("a client without a certificate got through")
	}
	if _, _, err := dial(t, addr, roots, pair(other)); err == nil {
		t.Error("a client with another CA's certificate got through")
	}
	if _, _, err := dial(t, addr, roots, pair(clients)); err != nil {
		t.Errorf("a client with the CA's certificate: %v", err)
	}
}

// TestBadFiles: files that do not load fail New with a clear error.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	write(t, junk, []byte("junk"))
	for _, cfg := range []Config{
		{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: junk},
		{CertFile: junk, KeyFile: junk},
		{CertFile: junk},
		{ClientCAFile: junk},
	} {
		if _, err := New(cfg, logger(t), nil); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
