// Package kubeapi runs a real kube-apiserver on a private etcd for tests:
// bearer tokens from a token file, RBAC authorization and service-account
// keys, so ServiceAccount tokens can be issued and checked. A test may stop
// the API server and start it again on the same port, certificates and
// data while etcd keeps running.
//
// The binary is $KVROUTER_KUBE_APISERVER or the one test/kube-apiserver.sh
// builds once per machine and caches under the Go build cache (make deps
// runs it). Without one a test skips locally and fails under CI=true or
// KVROUTER_REQUIRE_APISERVER=1 (make test sets it), or when its Options
// require the binary. etcd must be on the PATH (test/deps.sh system).
package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the kube-apiserver release looked for in the cache; it is
// KUBE_VERSION's default in test/kube-apiserver.sh.
const Version = "v1.36.3"

// AdminToken authenticates as a member of system:masters.
const AdminToken = "admintoken"

// Options says how a test wants its API server.
type Options struct {
	// Require fails the test when no kube-apiserver binary is found even
	// outside CI; otherwise a missing binary skips the test locally.
	Require bool
	// Args are flags added after the API server's own.
	Args []string
}

// Server is a kube-apiserver on a private etcd. Its fields are set by New;
// Admin by every Start.
type Server struct {
	// URL is the API server's https address.
	URL string
	// CAFile is the certificate that signed the serving certificate; it
	// exists once the API server has started for the first time.
	CAFile string
	// Dir holds etcd's data, the certificates, keys, kubeconfigs and logs.
	Dir string
	// Admin is a clientset authenticated with AdminToken.
	Admin *kubernetes.Clientset

	bin  string
	args []string
	cmd  *exec.Cmd
}

// binary returns the kube-apiserver to run, or ends the test when there is
// none: a skip locally, a failure when require is set or under CI.
func binary(t testing.TB, require bool) string {
	t.Helper()
	if p := os.Getenv("KVROUTER_KUBE_APISERVER"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "kvrouter-kube-apiserver", Version, "kube-apiserver")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if require || os.Getenv("CI") == "true" || os.Getenv("KVROUTER_REQUIRE_APISERVER") == "1" {
		t.Fatal("no kube-apiserver: run test/kube-apiserver.sh (make deps does)")
	}
	t.Skip("no kube-apiserver (test/kube-apiserver.sh builds it; make deps does)")
	return ""
}

// New starts etcd and prepares the API server's flags; Start runs the API
// server itself. Both stop when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{bin: binary(t, opts.Require), Dir: t.TempDir()}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("no etcd: test/deps.sh system installs it")
	}
	t.Cleanup(func() { s.logTails(t) }) // runs after the processes' cleanups
	client, peer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	startLogged(t, s.Dir, "etcd", "--data-dir", filepath.Join(s.Dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL, "--unsafe-no-fsync=true")
	writeServiceAccountKey(t, s.Dir)
	if err := os.WriteFile(filepath.Join(s.Dir, "tokens.csv"), []byte(AdminToken+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(secure)
	s.CAFile = filepath.Join(s.Dir, "certs", "apiserver.crt")
	s.args = append([]string{
		"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--secure-port=" + strconv.Itoa(secure), "--cert-dir=" + filepath.Join(s.Dir, "certs"),
		"--service-account-issuer=" + s.URL + "/", "--service-account-key-file=" + filepath.Join(s.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(s.Dir, "sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC", "--token-auth-file=" + filepath.Join(s.Dir, "tokens.csv"), "--disable-admission-plugins=ServiceAccount",
	}, opts.Args...)
	return s
}

// Start runs the API server, waits until it answers /readyz and sets Admin.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.cmd = startLogged(t, s.Dir, s.bin, s.args...)
	s.waitReady(t)
	s.Admin = s.Client(t, AdminToken)
}

// Stop kills the API server if it runs; etcd keeps running.
func (s *Server) Stop() {
	if s.cmd != nil {
		stopProcess(s.cmd)
	}
}

// Client returns a clientset that authenticates with token.
func (s *Server) Client(t testing.TB, token string) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.restConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Kubeconfig writes a kubeconfig file that authenticates with token and
// returns its path.
func (s *Server) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	f, err := os.CreateTemp(s.Dir, "kubeconfig-")
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: test, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, s.URL, s.CAFile, token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func (s *Server) restConfig(token string) *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}}
}

// waitReady polls /readyz until the API server answers ok: its start-up
// happens in another process, so there is nothing to wait on but its answer.
func (s *Server) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a hang guard; it is ready in ~3 s
	for {
		err := s.ready(t.Context())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver never became ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) ready(ctx context.Context) error {
	if _, err := os.Stat(s.CAFile); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(s.restConfig(AdminToken))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// logTails logs the end of etcd's and the API server's output when the test
// failed.
func (s *Server) logTails(t testing.TB) {
	if !t.Failed() {
		return
	}
	for _, name := range []string{"etcd", filepath.Base(s.bin)} {
		b, err := os.ReadFile(filepath.Join(s.Dir, name+".log"))
		if err != nil {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("%s log tail:\n%s", name, b)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// startLogged runs name until stopped or the test ends, its output appended
// to dir/<name>.log.
func startLogged(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, filepath.Base(name)+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		stopProcess(cmd)
		_ = logf.Close()
	})
	return cmd
}

// stopProcess kills cmd and reaps it, once.
func stopProcess(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func writeServiceAccountKey(t testing.TB, dir string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*pem.Block{
		"sa.key": {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
		"sa.pub": {Type: "PUBLIC KEY", Bytes: pub},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
