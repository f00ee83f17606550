package router

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// homesRouter is the test router with KV caches of capacity tokens on the
// llama pods a, b and c (homes fill 80% of that), and no router queue. It
// has routed 30 one-off prompts: no prefix of a test's few requests carries
// more than a pod's share of the traffic.
func homesRouter(t testing.TB, capacity int64) *testRouter {
	t.Helper()
	tr := newTestRouter(t)
	tr.cfg.QueuePrefillsPerPod = 0
	for _, p := range []string{"a", "b", "c"} {
		tr.fleet.Load(p).KVCapacity.Store(capacity)
	}
	for i := range 30 {
		tr.send(fmt.Sprintf("%04d", i))
	}
	return tr
}

// rankedRouter is homesRouter with 1 request waiting on b and 2 on c:
// a is the cheapest pod for a cold prompt, then b, then c.
func rankedRouter(t testing.TB, capacity int64) *testRouter {
	t.Helper()
	tr := homesRouter(t, capacity)
	tr.loads(map[string]int64{"b": 1, "c": 2}, nil, 0)
	return tr
}

// group is a prompt of n bytes (n tokens, n/4 blocks) that starts with
// its own first block: group i's prefix.
func group(i, n int) string {
	s := fmt.Sprintf("g%03d ", i) + strings.Repeat("shared system prompt. ", n/20+1)
	return s[:n]
}

// send routes a completion of prompt and releases it at once (prefilled,
// done), so that it leaves no queue behind; it returns the pod.
func (tr *testRouter) send(prompt string) string {
	tr.t.Helper()
	d, err := tr.route("/v1/completions", completion("llama", prompt, ""))
	if err != nil {
		tr.t.Fatal(err)
	}
	d.Prefilled()
	d.Done()
	return d.Pod
}

// homedOn is the prefixes homed on each pod.
func (tr *testRouter) homedOn() map[string]int {
	tr.homes.mu.Lock()
	defer tr.homes.mu.Unlock()
	out := map[string]int{}
	for _, h := range tr.homes.keys {
		name := "none"
		for _, m := range tr.fleet.Snapshot().Members() {
			if m.ID == h.pod {
				name = m.Pod.Name
			}
		}
		out[name]++
	}
	return out
}

func (tr *testRouter) homeResults() map[string]float64 {
	out := map[string]float64{}
	for i, n := range homeResultNames {
		if v := testutil.ToFloat64(tr.homes.met[i]); v > 0 {
			out[n] = v
		}
	}
	return out
}

// twice routes two requests of prompt: its prefix's first, by cost, and
// its second, which homes it. It returns the second's pod.
func (tr *testRouter) twice(prompt string) string {
	tr.t.Helper()
	tr.send(prompt)
	return tr.send(prompt)
}

// TestHomesFillEachPodToItsShare: a prefix is homed on its second request,
// and each pod homes the prefixes that fill 80% of its cache, however
// cheap it is; a prefix that fits on no pod has no home and is routed by
// cost; and while the prefixes seen twice need more than the pods' homes
// may fill, homes step aside.
func TestHomesFillEachPodToItsShare(t *testing.T) {
	tr := rankedRouter(t, 10000) // 8,000 tokens of homes each
	for i := range 4 {
		tr.send(group(i, 8)) // its first request caches two blocks: the prefix lives nowhere yet
		tr.send(group(i, 5000))
	}
	got := tr.homedOn()
	if got["a"] != 1 || got["b"] != 1 || got["c"] != 1 || got["none"] != 31 {
		t.Fatalf("homes by pod = %v, want one each, and the rest (30 seen once) with none", got)
	}
	if r := tr.homeResults(); r["first"] != 34 || r["placed"] != 3 || r["nowhere"] != 1 || len(r) != 3 {
		t.Fatalf("home results = %v, want 34 first, 3 placed and 1 nowhere", r)
	}
	if n := testutil.ToFloat64(tr.homes.homes); n != 3 {
		t.Fatalf("homed_prefixes = %v, want 3", n)
	}
	tr.send(group(4, 8))
	tr.send(group(4, 5000)) // 25,000 tokens seen twice, of 24,000
	if r := tr.homeResults(); r["full"] != 1 {
		t.Fatalf("home results = %v, want one full", r)
	}
}

// TestHomeHoldsAgainstACopy: a group homed on a goes to a while a's cost
// exceeds another pod's by less than that pod's prefill, priced cold when
// that pod has no room for the group (a copy there would evict its homes),
// although b holds a copy and is cheaper for the one request; past that
// bound it goes by cost. When b has room, b's copy is priced as it is.
func TestHomeHoldsAgainstACopy(t *testing.T) {
	tr := rankedRouter(t, 100000)
	g := group(1, 4000)
	if pod := tr.twice(g + " first question?"); pod != "a" {
		t.Fatalf("the group's requests went to %s, want a (the cheapest)", pod)
	}
	for _, p := range []string{"b", "c"} {
		tr.fleet.Load(p).KVCapacity.Store(4000) // homes fill 3,200 tokens: no room for the group
	}
	tr.store("a", g, "", "")
	tr.store("b", g, "", "")
	tr.loads(map[string]int64{"a": 4}, nil, 0) // a queue on a: b is cheaper
	sa, sb := tr.scoreOn(completion("llama", g+" second?", ""), "a", "queued"), tr.scoreOn(completion("llama", g+" second?", ""), "b", "queued")
	if sb.Cost >= sa.Cost || sa.Cost > 2*sb.cold-sb.Queue {
		t.Fatalf("costs a %.3f, b %.3f (cold %.3f): want b cheaper and a within b's cold prefill twice", sa.Cost, sb.Cost, sb.cold)
	}
	if pod := tr.send(g + " second?"); pod != "a" {
		t.Fatalf("with a copy on b, the group went to %s, want its home a", pod)
	}
	tr.fleet.Load("b").KVCapacity.Store(100000)
	if pod := tr.send(g + " second?"); pod != "b" {
		t.Fatalf("with a copy on b and room there, the group went to %s, want b", pod)
	}
	tr.fleet.Load("b").KVCapacity.Store(4000)
	tr.loads(map[string]int64{"a": 200}, nil, 0)
	tr.fleet.Load("a").InFlight.Store(200) // this replica's: no other routes there
	if pod := tr.send(g + " third?"); pod != "b" {
		t.Fatalf("with a deep queue on a, the group went to %s, want b", pod)
	}
	if r := tr.homeResults(); r["first"] != 31 || r["placed"] != 1 || r["home"] != 1 || r["away"] != 2 {
		t.Fatalf("home results = %v, want first, placed and home once, away twice", r)
	}
	if got := tr.homedOn(); got["a"] != 1 {
		t.Fatalf("homes = %v, want the group still homed on a", got)
	}
}

// TestHomeMovesWhenItsPodOutgrowsItsCache: a prefix whose new prompts
// grow its home's prefixes past 80% of its cache moves, with the request,
// to the cheapest pod where it fits, though its home caches it.
func TestHomeMovesWhenItsPodOutgrowsItsCache(t *testing.T) {
	tr := rankedRouter(t, 10000)
	a, b := group(1, 4000), group(2, 3000)
	tr.twice(a)
	tr.twice(b)
	if got := tr.homedOn(); got["a"] != 2 {
		t.Fatalf("homes = %v, want both on a (7,000 of its 8,000 tokens)", got)
	}
	tr.store("a", b, "", "")
	if pod := tr.send(b + strings.Repeat(" a long new question", 100)); pod != "b" { // +2,000 tokens: a's homes 9,000
		t.Fatalf("the prefix that outgrew a's cache went to %s, want b (the cheapest with room)", pod)
	}
	if got := tr.homedOn(); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("homes = %v, want one on a and the moved one on b", got)
	}
	ida, _ := tr.index.Pod("a")
	if homed, fill := tr.Homed(ida, tr.fleet.Load("a")); homed != 4000 || fill != 8000 {
		t.Fatalf("a homes %d tokens of %d, want 4,000 of 8,000", homed, fill)
	}
	if r := tr.homeResults(); r["moved"] != 1 {
		t.Fatalf("home results = %v, want one moved", r)
	}
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", b, ""))})
	if err != nil {
		t.Fatal(err)
	}
	// 5,000 distinct tokens, counted to within homeStride blocks of 4.
	if h := rep.Home; h == nil || h.Pod != "b" || h.Tokens < 5000 || h.Tokens >= 5000+homeStride*4 || h.Requests != 3 || h.PodTokens != h.Tokens || h.PodFill != 8000 {
		t.Fatalf("score's home = %+v, want b homing the prefix's ~5,000 tokens of its 8,000, after 3 requests", h)
	}
}

// TestHomesNeedKnownCaches: while no pod's KV capacity is known, no prefix
// has a home and requests are routed by cost alone.
func TestHomesNeedKnownCaches(t *testing.T) {
	tr := homesRouter(t, 0)
	tr.store("b", prompt, "", "")
	if pod := tr.twice(prompt); pod != "b" {
		t.Fatalf("routed to %s, want b (cached)", pod)
	}
	if r, got := tr.homeResults(), tr.homedOn(); r["first"] != 31 || r["full"] != 1 || len(r) != 2 || got["none"] != 31 {
		t.Fatalf("home results = %v, homes %v; want first and full once, no home", r, got)
	}
}

// TestASharedPrefixHasNoHome: a prefix carrying more than a pod's share of
// the requests (every prompt starts with it) is routed by cost, each
// prompt where it is cheapest.
func TestASharedPrefixHasNoHome(t *testing.T) {
	tr := homesRouter(t, 1000000)
	system := group(1, 400)
	for i := range 20 { // past the 15th, it carries more than a third of the 30 + 20 requests
		tr.send(fmt.Sprintf("%s conversation %d", system, i))
	}
	tr.send(group(2, 400))
	tr.send(group(2, 400))
	if r := tr.homeResults(); r["first"] != 32 || r["placed"] != 2 || r["home"] != 13 || r["shared"] != 5 {
		t.Fatalf("home results = %v, want 32 first, 2 placed, 13 home, 5 shared", r)
	}
	if got := tr.homedOn(); got["none"] != 31 || len(got) != 2 {
		t.Fatalf("homes = %v, want the shared prefix (and the one-offs) without a home, the other homed", got)
	}
}

// TestHomesOff: homes off keep no table; the homes' tuning must be sane
// either way.
func TestHomesOff(t *testing.T) {
	tr := newTestRouter(t)
	cfg := DefaultConfig()
	cfg.Homes = false
	r, err := New(cfg, tr.fleet, tr.index, tr.hasher, byteTokens{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatalf("homes off: %v", err)
	}
	if r.homes != nil {
		t.Fatal("homes off keep a table")
	}
	cfg.Tuning.HomeFill = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "home fill") {
		t.Fatalf("home fill 0: err %v, want the home fill refused", err)
	}
}

// TestANewPrefixLivesWhereItIsCached: a prefix new to the router that a
// pod caches half of already lives there: homed there if it fits, and
// routed there by cost, without a home, if that pod's homes are full.
func TestANewPrefixLivesWhereItIsCached(t *testing.T) {
	tr := rankedRouter(t, 10000)
	tr.twice(group(1, 4000))
	tr.twice(group(2, 4000))
	if got := tr.homedOn(); got["a"] != 2 {
		t.Fatalf("homes = %v, want both on a", got)
	}
	g := group(3, 2000)
	tr.store("a", g, "", "")
	if pod := tr.twice(g + " a question?"); pod != "a" {
		t.Fatalf("routed to %s, want a, which caches the prefix", pod)
	}
	if got, r := tr.homedOn(), tr.homeResults(); got["none"] != 31 || r["nowhere"] != 1 {
		t.Fatalf("homes = %v, results %v; want the prefix without a home (a is full)", got, r)
	}
	g = group(4, 2000)
	tr.store("b", g, "", "")
	if pod := tr.twice(g + " a question?"); pod != "b" {
		t.Fatalf("routed to %s, want b, which caches the prefix", pod)
	}
	if got := tr.homedOn(); got["b"] != 1 {
		t.Fatalf("homes = %v, want the prefix homed on b", got)
	}
}

// TestANewHomeIsNotAQueue: a prefix whose only pod with room has a queue
// longer than the bound gets no home, and goes where it is cheapest.
func TestANewHomeIsNotAQueue(t *testing.T) {
	tr := rankedRouter(t, 10000)
	for i := range 4 { // two on a, then two on b: both full
		tr.send(group(i, 8))
		tr.send(group(i, 3900))
	}
	if got := tr.homedOn(); got["a"] != 2 || got["b"] != 2 {
		t.Fatalf("homes = %v, want two on a and two on b", got)
	}
	tr.loads(map[string]int64{"b": 1, "c": 200}, nil, 0)
	tr.fleet.Load("c").InFlight.Store(200) // this replica's: no other routes there
	tr.send(group(9, 8))
	if pod := tr.send(group(9, 3900)); pod == "c" {
		t.Fatal("a new home's request went to c, behind its queue")
	}
	if got, r := tr.homedOn(), tr.homeResults(); got["c"] != 0 || r["away"] != 1 {
		t.Fatalf("homes = %v, results %v; want none on c, one away", got, r)
	}
}

// TestHomesStepAsideForOthers: while the pods run more requests than this
// replica has in flight there (other replicas route there too), homes step
// aside and requests go by cost; as the counts meet again, they resume.
func TestHomesStepAsideForOthers(t *testing.T) {
	tr := rankedRouter(t, 100000)
	g := group(1, 4000)
	tr.twice(g + " first?")
	tr.store("a", g, "", "")
	tr.store("b", g, "", "")
	tr.loads(map[string]int64{"a": 4}, map[string]int64{"b": 3}, 0) // 7 requests running or waiting, none of this replica's
	for _, p := range []string{"b", "c"} {
		tr.fleet.Load(p).KVCapacity.Store(4000) // no room: the home would hold
	}
	if pod := tr.send(g + " second?"); pod != "b" {
		t.Fatalf("with others routing to the pods, the group went to %s, want b (the cheapest)", pod)
	}
	tr.fleet.Load("a").InFlight.Store(2)
	tr.fleet.Load("b").InFlight.Store(2) // 4 of the 7 this replica's: within 1.5 × 4 + 4
	if pod := tr.send(g + " third?"); pod != "a" {
		t.Fatalf("with the pods' requests this replica's, the group went to %s, want its home a", pod)
	}
	if r := tr.homeResults(); r["others"] != 1 || r["home"] != 1 {
		t.Fatalf("home results = %v, want others and home once", r)
	}
}

// BenchmarkRouteHome is one decision (parse, tokenize, hash, match,
// score, pick, and the decision's release) of a 4,000-token prompt of one
// of 64 groups homed on three pods, with homes (home_hold 1) and without
// them (home_hold 0): what homes add to a decision.
//
//	go test -run '^$' -bench RouteHome -benchmem ./router/
func BenchmarkRouteHome(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("homes=%v", on), func(b *testing.B) {
			tr := homesRouter(b, 1000000) // 800,000 tokens of homes each: the 64 groups fit
			if !on {
				tr.homes = nil
			}
			prompts := make([]string, 64)
			for i := range prompts {
				prompts[i] = group(i, 4000)
				tr.send(prompts[i])
				tr.send(prompts[i])
			}
			if on && len(tr.homedOn()) < 2 {
				b.Fatalf("homes = %v, want the groups homed over the pods", tr.homedOn())
			}
			b.ResetTimer()
			for i := range b.N {
				tr.send(prompts[i%len(prompts)])
			}
		})
	}
}
