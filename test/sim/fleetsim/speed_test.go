package fleetsim

import (
	"math"
	"slices"
	"testing"
)

// TestSlowPodTakesLonger: a pod of speed 0.5 takes twice as long for a
// request's prefill step as a pod of speed 1, and its counters show the
// prompt, its prefix-cache query and its prefill time.
func TestSlowPodTakesLonger(t *testing.T) {
	w := manual(Request{Arrival: 0, Prompt: 640, Output: 1, Hashes: make([]uint64, 40)})
	for i := range w.Requests[0].Hashes {
		w.Requests[0].Hashes[i] = uint64(i + 1)
	}
	ttft := map[float64]float64{}
	for _, speed := range []float64{1, 0.5} {
		cfg := DefaultConfig()
		cfg.Pods, cfg.Speeds = 1, []float64{speed}
		var p *firstPod
		var sim *Sim
		res, err := Run(cfg, w, func(s *Sim) (Policy, error) { p, sim = &firstPod{s: s}, s; return p, nil })
		if err != nil {
			t.Fatal(err)
		}
		o := res.Outcomes[0]
		ttft[speed] = o.First - o.Arrival
		sim.scrape()
		c := sim.Metrics()[0].Prefill
		if c.PromptTokens != 640 || c.CacheQueries != 640 || c.CacheHits != 0 || c.Prefills != 1 || math.Abs(c.PrefillSeconds-ttft[speed]) > 1e-9 {
			t.Errorf("speed %g: counters %+v, want 640 tokens queried and prompted, one prefill of %g s", speed, c, ttft[speed])
		}
	}
	if r := ttft[0.5] / ttft[1]; math.Abs(r-2) > 1e-9 {
		t.Errorf("TTFT at speed 0.5 = %g × at speed 1, want 2", r)
	}
	cfg := DefaultConfig()
	cfg.Speeds = []float64{1, 2}
	if cfg.Validate() == nil {
		t.Error("Validate accepted 2 speeds for 8 pods")
	}
}

// TestLearnedSpeeds: on a fleet whose last two pods run at half the
// speed, kvrouter-learned learns the slow pods at about half the fast
// ones' speed from the pods' scraped counters: ±20% in the mean over eight
// seeds, and in every run slower than the fast pods and above 0.3 of them
// (a learned speed is what a token costs the pod under its traffic, so one
// run's ratio moves with where the routing put the decodes: 0.44–0.78
// over these seeds); kvrouter, which prices every pod at the configured
// speed, learns nothing. The load is tinySharedPrefix's first two stages
// (its 80 QPS overloads the slow pods, whose learned speed then takes in
// the decodes crowding their steps).
func TestLearnedSpeeds(t *testing.T) {
	sum, n := 0.0, 0
	for seed := uint64(1); seed <= 8; seed++ {
		cfg, w := twoSpeedFleet(t, seed)
		res := runPolicy(t, cfg, w, "kvrouter-learned")
		last := map[int]SpeedSample{}
		for _, s := range res.Speeds {
			last[s.Pod] = s
		}
		if len(last) != 4 {
			t.Fatalf("seed %d: speeds sampled for %d pods, want 4: %v", seed, len(last), res.Speeds)
		}
		fast := (last[0].TokensPerSecond + last[1].TokensPerSecond) / 2
		for _, i := range []int{2, 3} {
			r := last[i].TokensPerSecond / fast
			if r < 0.3 || r >= 1 {
				t.Errorf("seed %d: pod %d at half speed learned at %.0f tokens/s, %.2f × the fast pods' %.0f; want slower than them, above 0.3", seed, i, last[i].TokensPerSecond, r, fast)
			}
			sum, n = sum+r, n+1
		}
	}
	if mean := sum / float64(n); mean < 0.4 || mean > 0.6 {
		t.Errorf("the slow pods learned at %.2f × the fast pods' speed in the mean over 8 seeds, want 0.5 ±20%%", mean)
	}
	cfg, w := twoSpeedFleet(t, 1)
	if res := runPolicy(t, cfg, w, "kvrouter"); res.Speeds != nil {
		t.Errorf("kvrouter sampled speeds: %v", res.Speeds[:1])
	}
}

// TestMeanKVRouter: kvrouter-mean prices every pod at the fleet's mean
// speed, and learns nothing.
func TestMeanKVRouter(t *testing.T) {
	cfg, w := tinySharedPrefix(t, 1, 1)
	cfg.Speeds = []float64{1, 1, 0.5, 0.5}
	var p *kvRouter
	res, err := Run(cfg, w, func(s *Sim) (Policy, error) {
		var err error
		p, err = newMeanKVRouter(s)
		return p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 1 / (cfg.PrefillTokensPerSecond * 0.75)
	for i := range cfg.Pods {
		if got := p.r.PrefillSecondsPerToken(p.fleet.Load(podName(i))); math.Abs(got-want) > 1e-12 {
			t.Errorf("pod %d priced at %.0f tokens/s, want the mean %.0f", i, 1/got, 1/want)
		}
	}
	if res.Speeds != nil {
		t.Errorf("kvrouter-mean sampled speeds: %v", res.Speeds[:1])
	}
}

// TestExactKVRouter: kvrouter-exact prices each pod at its configured
// speed from the start to the end of the run, whatever the pods' counters
// show.
func TestExactKVRouter(t *testing.T) {
	cfg, w := twoSpeedFleet(t, 1)
	res := runPolicy(t, cfg, w, "kvrouter-exact")
	pods := map[int]int{}
	for _, s := range res.Speeds {
		want := cfg.PrefillTokensPerSecond * cfg.Speeds[s.Pod]
		if math.Abs(s.TokensPerSecond/want-1) > 1e-6 {
			t.Errorf("at %.0f s pod %d priced at %.1f tokens/s, want its speed %.1f", s.At, s.Pod, s.TokensPerSecond, want)
		}
		pods[s.Pod]++
	}
	if len(pods) != cfg.Pods || pods[0] < 2 {
		t.Errorf("speeds sampled %v times by pod, want every pod over the run", pods)
	}
}

// twoSpeedFleet is tinySharedPrefix's first two stages (its 80 QPS
// overloads the slow pods) under seed, on its fleet with the last two
// pods at half the speed.
func twoSpeedFleet(t *testing.T, seed uint64) (Config, *Workload) {
	t.Helper()
	cfg, w := tinySharedPrefix(t, seed, 20)
	w.Requests = slices.DeleteFunc(w.Requests, func(r Request) bool { return r.Level > 1 })
	w.Levels = w.Levels[:2]
	cfg.Speeds = []float64{1, 1, 0.5, 0.5}
	return cfg, w
}
