package test

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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiServer is a real kube-apiserver on a private etcd that a test can stop
// and start again on the same port, certificates and data (as in
// kvevents/discovery's tests, which also explain how the binary is built).
type apiServer struct {
	bin, dir, url, ca string
	args              []string
	cmd               *exec.Cmd
	admin             *kubernetes.Clientset
}

func kubeAPIServerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KVROUTER_KUBE_APISERVER"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "kvrouter-kube-apiserver", "v1.36.3", "kube-apiserver")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no kube-apiserver: make test-e2e runs test/kube-apiserver.sh (make deps)")
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

// startLogged runs name until stopped or the test ends, its output in
// dir/<name>.log.
func startLogged(t *testing.T, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, filepath.Base(name)+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		stopProcess(cmd)
		_ = logf.Close()
	})
	return cmd
}

func stopProcess(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// newAPIServer prepares etcd (started) and the API server's flags; start
// runs the API server itself.
func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	a := &apiServer{bin: kubeAPIServerBinary(t), dir: t.TempDir()}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("no etcd: test/deps.sh system installs it")
	}
	client, peer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	startLogged(t, a.dir, "etcd", "--data-dir", filepath.Join(a.dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL, "--unsafe-no-fsync=true")
	writeSAKey(t, a.dir)
	if err := os.WriteFile(filepath.Join(a.dir, "tokens.csv"), []byte("admintoken,admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.url = "https://127.0.0.1:" + strconv.Itoa(secure)
	a.ca = filepath.Join(a.dir, "certs", "apiserver.crt")
	a.args = []string{
		"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--secure-port=" + strconv.Itoa(secure), "--cert-dir=" + filepath.Join(a.dir, "certs"),
		"--service-account-issuer=" + a.url + "/", "--service-account-key-file=" + filepath.Join(a.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(a.dir, "sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC", "--token-auth-file=" + filepath.Join(a.dir, "tokens.csv"), "--disable-admission-plugins=ServiceAccount",
		// Watches read etcd directly and etcd is compacted every second, so a
		// watch resumed from an old resourceVersion after a restart can find
		// it compacted (410 Gone) and the informer must relist.
		"--watch-cache=false", "--etcd-compaction-interval=1s",
	}
	return a
}

func writeSAKey(t *testing.T, dir string) {
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

// start runs the API server and waits until it answers /readyz.
func (a *apiServer) start(t *testing.T) {
	t.Helper()
	a.cmd = startLogged(t, a.dir, a.bin, a.args...)
	if !poll(func() bool { return a.ready(t) == nil }) {
		t.Fatalf("kube-apiserver never became ready: %v", a.ready(t))
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: a.url, BearerToken: "admintoken", TLSClientConfig: rest.TLSClientConfig{CAFile: a.ca}})
	if err != nil {
		t.Fatal(err)
	}
	a.admin = c
}

// stop kills the API server (etcd keeps running).
func (a *apiServer) stop() { stopProcess(a.cmd) }

func (a *apiServer) ready(t *testing.T) error {
	if _, err := os.Stat(a.ca); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(&rest.Config{Host: a.url, BearerToken: "admintoken", TLSClientConfig: rest.TLSClientConfig{CAFile: a.ca}})
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

// kubeconfig writes a kubeconfig file for the admin token. The CA file
// exists only once the API server has started.
func (a *apiServer) kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(a.dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: test, user: {token: admintoken}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, a.url, a.ca)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPod creates a ready vLLM pod at 127.0.0.1 serving qwen3, as the
// kubelet would report it.
func (a *apiServer) runPod(t *testing.T, name string) {
	t.Helper()
	ctx := t.Context()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "kvrouter", Labels: map[string]string{"kvrouter.io/pool": "default"},
			Annotations: map[string]string{"kvrouter.io/model": "qwen3", "kvrouter.io/port": "8000"},
		},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}
	p, err := a.admin.CoreV1().Pods("kvrouter").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := a.admin.CoreV1().Pods("kvrouter").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pods returns the names /debug/pods lists.
func (p *kvrouterProcess) pods(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for name := range p.podEntries(t) {
		out[name] = true
	}
	return out
}

// TestE2EAPIServerRestart runs the kvrouter binary with discovery against a
// real kube-apiserver: not ready while the API server is down at start,
// ready once the informer synced; after the API server is killed and
// started again, with pods deleted and created meanwhile and etcd
// compacting every second, discovery resumes and kvrouter's pods are
// exactly the cluster's.
func TestE2EAPIServerRestart(t *testing.T) {
	slowE2E(t)
	api := newAPIServer(t)
	bin := buildKVRouter(t)
	api.start(t) // once, for its certificates: the kubeconfig names the CA
	api.stop()
	kubeconfig := api.kubeconfig(t)
	router := startKVRouter(t, bin, "--kubeconfig", kubeconfig, "--namespace", "kvrouter", "--model", "qwen3="+qwen3Dir(t))
	// The API server is down: the informer cannot list, so kvrouter (which
	// listens already) must not report ready.
	if router.ready(t) {
		t.Fatal("kvrouter ready before its pod informer ever synced")
	}
	api.start(t)
	if _, err := api.admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvrouter"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !poll(func() bool { return router.ready(t) }) {
		t.Fatal("kvrouter never became ready after the API server came up")
	}
	api.runPod(t, "before")
	api.runPod(t, "doomed")
	if !poll(func() bool { p := router.pods(t); return p["kvrouter/before"] && p["kvrouter/doomed"] }) {
		t.Fatalf("kvrouter's pods = %v, want before and doomed", router.pods(t))
	}

	api.stop()
	api.start(t)
	// While kvrouter's watch is broken: one pod goes, one comes.
	zero := int64(0)
	if err := api.admin.CoreV1().Pods("kvrouter").Delete(t.Context(), "doomed", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	api.runPod(t, "after")
	want := map[string]bool{"kvrouter/before": true, "kvrouter/after": true}
	var got map[string]bool
	if !poll(func() bool {
		got = router.pods(t)
		return len(got) == 2 && got["kvrouter/before"] && got["kvrouter/after"]
	}) {
		t.Fatalf("after the API server restart kvrouter's pods = %v, want %v", got, want)
	}
	if !router.ready(t) {
		t.Error("kvrouter not ready after the API server restart")
	}
}
