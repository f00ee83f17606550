package test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvrouter/kvrouter/internal/fixture/kubeapi"
	"github.com/kvrouter/kvrouter/internal/fixture/toxiproxy"
)

// reviewBound is how long an admin request may take while the API server
// does not answer: one review's deadline (5 s) and some.
const reviewBound = 6 * time.Second

// TestWireFaultsAPIServer: the kvrouter binary discovers its pods through
// a real kube-apiserver behind toxiproxy, and asks it about every admin
// request (TokenReview, SubjectAccessReview). While the wire resets,
// stalls or delays by 8 s: decisions go on over the pods already known
// (none fails, p99 under decisionBound); an admin request is answered
// within reviewBound, 503 when the API server cannot say; failures show in
// kvrouter_admin_auth_total{result="error"} with a WARN or two, not one a
// request. Once the toxic is gone, a pod created meanwhile is discovered
// and admin requests are allowed again.
func TestWireFaultsAPIServer(t *testing.T) {
	tp := toxiproxy.New(t)
	api := kubeapi.New(t, kubeapi.Options{})
	api.Start(t)
	if _, err := api.Admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvrouter"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tp.Proxy("apiserver", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := api.Kubeconfig(t, kubeapi.AdminToken)
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, []byte(strings.Replace(string(b), api.URL, "https://"+proxy.Addr, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	kv := startKVRouter(t, buildKVRouter(t), "--kubeconfig", kubeconfig, "--namespace", "kvrouter", "--model", "qwen3="+qwen3Dir(t))
	kv.token = kubeapi.AdminToken
	runPod(t, api.Admin, "a")
	runPod(t, api.Admin, "b")
	if !poll(func() bool { return kv.ready(t) && kv.pods(t)["kvrouter/a"] && kv.pods(t)["kvrouter/b"] }) {
		t.Fatalf("kvrouter never became ready with pods a and b: %v", kv.pods(t))
	}

	// The workload: decisions through ext_proc (nothing listens on the
	// pods' port: decisions only), and admin requests each on a path never
	// asked, so each needs the API server's reviews.
	var loop decisionLoop
	var mu sync.Mutex
	var slowestAdmin time.Duration
	ctx, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	t.Cleanup(func() { stop(); done.Wait() })
	done.Go(func() {
		loop.run(ctx, kv, func(i int) string { return prompt(restartTopics[i%len(restartTopics)], fmt.Sprint(i)) })
	})
	admin := func(i int) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/wire-%d", kv.admin, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+kv.token)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		d := time.Since(start)
		mu.Lock()
		slowestAdmin = max(slowestAdmin, d)
		mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				loop.fail("admin: " + err.Error())
			}
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	done.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			if code := admin(i); code != http.StatusNotFound && code != http.StatusServiceUnavailable && code != 0 {
				loop.fail(fmt.Sprintf("admin request answered %d, want 404 (allowed, no such profile) or 503", code))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	cases := []struct {
		name   string
		toxics []toxiproxy.Toxic
	}{
		{"reset", []toxiproxy.Toxic{resetPeer()}},
		{"stall", stall()},
		{"latency", []toxiproxy.Toxic{latency(8000)}},
	}
	for n, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			warnMark := kv.warns.count()
			loop.take()
			mu.Lock()
			slowestAdmin = 0
			mu.Unlock()
			errors0 := kv.sum(t, "kvrouter_admin_auth_total", "result=error")
			for _, x := range c.toxics {
				if err := proxy.Add(x); err != nil {
					t.Fatal(err)
				}
			}
			pod := fmt.Sprintf("during-%d", n)
			runPod(t, api.Admin, pod) // straight to the API server: kvrouter hears of it through the faulty wire
			shown := pollFor(30*time.Second, func() bool { return kv.sum(t, "kvrouter_admin_auth_total", "result=error") > errors0 })
			time.Sleep(2 * time.Second)
			if err := proxy.Clear(); err != nil {
				t.Fatal(err)
			}
			if !shown {
				t.Error(`kvrouter_admin_auth_total{result="error"} never grew while the API server could not answer`)
			}
			if !pollFor(60*time.Second, func() bool { return kv.pods(t)["kvrouter/"+pod] }) {
				t.Errorf("pod %s, created during the fault, not discovered a minute after it: %v", pod, kv.pods(t))
			}
			if !pollFor(30*time.Second, func() bool { return admin(1_000_000+n) == http.StatusNotFound }) {
				t.Error("admin requests still not allowed 30 s after the fault")
			}
			fails, lats := loop.take()
			mu.Lock()
			slowest := slowestAdmin
			mu.Unlock()
			p99 := p99Of(lats)
			warns := kv.warns.faultWarns(warnMark)
			t.Logf("%d decisions, p99 %v; slowest admin request %v; %d WARN lines", len(lats), p99, slowest, len(warns))
			for _, f := range fails {
				t.Errorf("failed: %s", f)
			}
			if p99 > decisionBound {
				t.Errorf("decision p99 %v, want <= %v", p99, decisionBound)
			}
			if slowest > reviewBound {
				t.Errorf("an admin request took %v, want <= %v", slowest, reviewBound)
			}
			if len(warns) > 6 {
				t.Errorf("%d WARN lines for one fault, want <= 6:\n%s", len(warns), strings.Join(warns, "\n"))
			}
		})
	}
}
