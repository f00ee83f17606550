package test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/internal/fixture/vllmpub"
)

// TestE2ELeaseHandover: two kvrouter processes share the index through a
// real redis-server. A pod stores a prompt's blocks while only the first
// runs, and enough events follow that the pod's replay buffer no longer
// holds their stores; the second starts then (its own view of the pod
// never hears of them) and matches them through Redis. The first is killed
// (SIGKILL) or stopped (SIGTERM); once the second writes the pod's events,
// it still matches every block. (Before a new writer continued the pod, it
// started the pod afresh with its own view: 0 blocks.)
func TestE2ELeaseHandover(t *testing.T) {
	slowE2E(t)
	bin := buildKVRouter(t)
	for _, how := range []string{"killed", "stopped"} {
		t.Run(how, func(t *testing.T) {
			srv := redisserver.New(t)
			f := startFleetWith(t, fleetOptions{pods: 1, publisher: func(_ int, c *vllmpub.Config) { c.BufferSteps = 2 }})
			sim := f.sims["sim-0"]
			args := []string{
				"--model", "qwen3=" + qwen3Dir(t), "--index-backend", "redis", "--index-redis-addr", srv.Addr,
				"--pod", fmt.Sprintf("sim-0=%s,model=qwen3,events=%d,replay=%d", f.pods["sim-0"],
					port(t, sim.Publisher().Endpoint()), port(t, sim.Publisher().ReplayEndpoint())),
			}
			a := startKVRouter(t, bin, args...)
			if !poll(func() bool { return a.ready(t) && a.gauge(t, "kvrouter_index_redis_leases") == 1 }) {
				t.Fatal("the first kvrouter never became ready and the pod's writer")
			}
			body := prompt("tides", "Why two a day?")
			f.post(t, "sim-0", body)
			want := len(sim.Cached()) // the prompt's full blocks, all the pod holds
			var got int
			if !poll(func() bool { _, m := a.score(t, body); got = m["sim-0"]; return want >= 4 && got == want }) {
				t.Fatalf("the first kvrouter matches %d blocks of the stored prompt, want the %d the pod holds", got, want)
			}
			for _, topic := range restartTopics[1:] { // the stores leave the replay buffer
				f.post(t, "sim-0", prompt(topic, "Explain it."))
			}
			b := startKVRouter(t, bin, args...)
			if !poll(func() bool { return b.ready(t) }) {
				t.Fatal("the second kvrouter never became ready")
			}
			if _, m := b.score(t, body); m["sim-0"] != want {
				t.Fatalf("the second kvrouter matches %d blocks through Redis, want %d", m["sim-0"], want)
			}
			switch how {
			case "killed":
				a.kill()
			case "stopped":
				if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				_ = a.cmd.Wait()
			}
			if !poll(func() bool { return b.gauge(t, "kvrouter_index_redis_leases") == 1 }) {
				t.Fatal("the second kvrouter never took the pod's lease")
			}
			if _, m := b.score(t, body); m["sim-0"] != want {
				t.Errorf("after the handover the pod matches %d blocks, want the %d it still holds", m["sim-0"], want)
			}
			f.post(t, "sim-0", prompt("tides", "And spring tides?")) // written by the new holder
			if !poll(func() bool { _, m := b.score(t, body); return m["sim-0"] == want }) {
				t.Errorf("the prompt's blocks are no longer matched after the new holder wrote an event")
			}
		})
	}
}

// gauge reads a metric without labels from the process's /metrics; -1
// when it is not there.
func (p *kvrouterProcess) gauge(t *testing.T, name string) float64 {
	t.Helper()
	resp := p.adminDo(t, http.MethodGet, "/metrics", nil)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}
