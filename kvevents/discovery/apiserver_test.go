package discovery

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

// KVROUTER_KUBE_APISERVER names a kube-apiserver binary; without it the
// tests look where test/kube-apiserver.sh caches one. KVROUTER_REQUIRE_APISERVER=1
// (make test sets it) turns a missing binary from a skip into a failure.
const apiserverVersion = "v1.36.3"

// apiserver is a real kube-apiserver on a private etcd, authenticating
// bearer tokens and authorizing with RBAC.
type apiserver struct {
	url, ca, dir string
	admin        *kubernetes.Clientset
}

func apiserverBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KVROUTER_KUBE_APISERVER"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "kvrouter-kube-apiserver", apiserverVersion, "kube-apiserver")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("KVROUTER_REQUIRE_APISERVER") == "1" {
		t.Fatal("no kube-apiserver: run test/kube-apiserver.sh")
	}
	t.Skip("no kube-apiserver (test/kube-apiserver.sh builds it; make test does)")
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs cmd until the test ends, its output in dir/name.log.
func start(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, filepath.Base(name)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil && len(b) > 4000 {
				t.Logf("%s log tail:\n%s", name, b[len(b)-4000:])
			}
		}
	})
}

func startAPIServer(t *testing.T) *apiserver {
	t.Helper()
	bin := apiserverBinary(t)
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("no etcd: test/deps.sh system installs it")
	}
	dir := t.TempDir()
	client, peer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	start(t, dir, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL, "--unsafe-no-fsync=true")
	writeServiceAccountKey(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte("admintoken,admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "https://127.0.0.1:" + strconv.Itoa(secure)
	start(t, dir, bin, "--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--secure-port="+strconv.Itoa(secure), "--cert-dir="+filepath.Join(dir, "certs"),
		"--service-account-issuer="+url+"/", "--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC", "--token-auth-file="+filepath.Join(dir, "tokens.csv"), "--disable-admission-plugins=ServiceAccount")
	a := &apiserver{url: url, ca: filepath.Join(dir, "certs", "apiserver.crt"), dir: dir}
	a.waitReady(t)
	a.admin = a.client(t, "admintoken")
	return a
}

func writeServiceAccountKey(t *testing.T, dir string) {
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

// waitReady polls /readyz until the API server answers ok: its start-up
// happens in another process, so there is nothing to wait on but its answer.
func (a *apiserver) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a hang guard; it is ready in ~3 s
	for {
		err := a.ready(t)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver never became ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *apiserver) ready(t *testing.T) error {
	if _, err := os.Stat(a.ca); err != nil {
		return err
	}
	rc := &rest.Config{Host: a.url, BearerToken: "admintoken", TLSClientConfig: rest.TLSClientConfig{CAFile: a.ca}}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+"/readyz", nil)
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

func (a *apiserver) client(t *testing.T, token string) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: a.url, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: a.ca}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeconfig writes a kubeconfig file that authenticates with token.
func (a *apiserver) kubeconfig(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(a.dir, "kubeconfig-"+strconv.Itoa(len(token)))
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: test, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, a.url, a.ca, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
