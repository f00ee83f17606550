package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvrouter/kvrouter/internal/fixture/envoyclient"
	"github.com/kvrouter/kvrouter/internal/fixture/testca"
)

// TestServeTLS runs serve with TLS on the ext_proc port from certificate
// files and a client CA. A client that verifies the server and presents a
// certificate the CA signed is routed; a plaintext client and one without a
// certificate get nothing. Files rotated while a stream is open serve the
// next connection, and the open stream completes.
func TestServeTLS(t *testing.T) {
	servers, clients := testca.New(t), testca.New(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	issue := func(serial int64) {
		c, k := servers.Issue(t, serial, x509.ExtKeyUsageServerAuth)
		for f, data := range map[string][]byte{certFile: c, keyFile: k} {
			if err := os.WriteFile(f, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	issue(100)
	if err := os.WriteFile(caFile, clients.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{
		"serve", "--admin-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json",
		"--grpc-tls", "on", "--grpc-tls-cert", certFile, "--grpc-tls-key", keyFile, "--grpc-tls-client-ca", caFile,
		"--grpc-tls-reload-interval", "20ms", "--pod", "p1=127.0.0.1:1,model=m,events=2,replay=3",
		"--grpc-health-addr", "127.0.0.1:0",
	}
	go func() { done <- run(ctx, args, io.Discard, pw); _ = pw.Close() }()
	urls := announced(t, pr, "ext_proc gRPC server", "gRPC health server")
	addr := urls["ext_proc gRPC server"]

	// The health port answers in plaintext, as probes without TLS need.
	hconn, err := grpc.NewClient(urls["gRPC health server"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hconn.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // until ready
		hr, err := healthpb.NewHealthClient(hconn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ext_proc.v3.ExternalProcessor"})
		if err == nil && hr.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plaintext health check = %v, %v; want SERVING", hr, err)
		}
	}

	c, k := clients.Issue(t, 7, x509.ExtKeyUsageClientAuth)
	clientCert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	var serial atomic.Int64 // of the server certificate of the last handshake
	dial := func(creds credentials.TransportCredentials) *envoyclient.Client {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return envoyclient.New(conn)
	}
	verifying := func(cert *tls.Certificate) credentials.TransportCredentials {
		cfg := &tls.Config{RootCAs: servers.Pool(), MinVersion: tls.VersionTLS12, VerifyConnection: func(cs tls.ConnectionState) error {
			serial.Store(cs.PeerCertificates[0].SerialNumber.Int64())
			return nil
		}}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return credentials.NewTLS(cfg)
	}
	req := func() envoyclient.Request {
		return envoyclient.Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hello"}`), Chunks: []int{5}}
	}
	routed := func(who string, client *envoyclient.Client, r envoyclient.Request) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second) // a hang guard
		defer rcancel()
		res, err := client.Do(rctx, r)
		if err != nil || res.Destination != "127.0.0.1:1" {
			t.Fatalf("%s: %+v, %v; want routed to p1", who, res, err)
		}
	}
	refused := func(who string, client *envoyclient.Client) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second) // a hang guard
		defer rcancel()
		if res, err := client.Do(rctx, req()); err == nil {
			t.Errorf("%s: %+v, want no answer at all", who, res)
		}
	}

	good := dial(verifying(&clientCert))
	routed("a verifying client with a certificate", good, req())
	if got := serial.Load(); got != 100 {
		t.Fatalf("served certificate %d, want 100", got)
	}
	refused("a plaintext client", dial(insecure.NewCredentials()))
	refused("a client without a certificate", dial(verifying(nil)))

	// Rotate while a request is in flight on the open connection.
	inFlight := req()
	inFlight.InFlight = func() {
		issue(200)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			probe := dial(verifying(&clientCert))
			routed("a new connection during the rotation", probe, req())
			if serial.Load() == 200 {
				return
			}
		}
		t.Error("the rotated certificate was never served")
	}
	routed("the request in flight across the rotation", good, inFlight)
	routed("the open connection after the rotation", good, req())

	cancel()
	if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("serve = %v", err)
	}
}

// TestTLSModes: auto is TLS with Kubernetes discovery and plaintext without;
// on and off say so; certificate files with TLS off, half a pair or a missing
// file are problems that name the setting.
func TestTLSModes(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args    []string
		tls     bool
		problem string
	}{
		{nil, false, ""},
		{[]string{"--kubeconfig", kubeconfig}, true, ""},
		{[]string{"--grpc-tls", "on"}, true, ""},
		{[]string{"--grpc-tls", "off", "--kubeconfig", kubeconfig}, false, ""},
		{[]string{"--grpc-tls", "maybe"}, false, `--grpc-tls: "maybe", want auto, on or off`},
		{[]string{"--grpc-tls-cert", kubeconfig, "--grpc-tls-key", kubeconfig}, false, `extproc.tls.mode: "auto" leaves TLS off`},
		{[]string{"--grpc-tls", "on", "--grpc-tls-cert", kubeconfig}, false, "--grpc-tls-cert: without key_file; give both"},
		{[]string{"--grpc-tls", "on", "--grpc-tls-client-ca", "/nope/ca.crt"}, false, "--grpc-tls-client-ca: stat /nope/ca.crt: no such file or directory"},
	} {
		c, err := loadConfig(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.validate("")
		if tt.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tt.problem) {
				t.Errorf("%q: validate = %v, want a problem saying %q", tt.args, err, tt.problem)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: validate = %v", tt.args, err)
			continue
		}
		if (s.certs != nil) != tt.tls {
			t.Errorf("%q: TLS %v, want %v", tt.args, s.certs != nil, tt.tls)
		}
	}
}
