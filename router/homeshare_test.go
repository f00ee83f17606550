package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/replica"
)

// startSharing has the routers' homes shared for an hour, as an index
// that shares them does from its first tick, before any request.
func startSharing(trs ...*testRouter) {
	for _, tr := range trs {
		tr.AdoptHomes(nil, nil, nil, tr.now().Add(time.Hour))
	}
}

// share hands from's changed homes to to, as an index shared by the two
// replicas does at a tick (the pods renamed to to's handles), and returns
// them; the sharing lasts a minute.
func share(from, to *testRouter) []replica.Home {
	from.t.Helper()
	homes, tails := from.HomesChanged(nil, nil)
	for i, h := range homes {
		homes[i].Pod = to.podID(from.podName(h.Pod))
	}
	to.AdoptHomes(homes, tails, nil, to.now().Add(time.Minute))
	return homes
}

func (tr *testRouter) podName(id kvindex.PodID) string {
	for _, m := range tr.fleet.Snapshot().Members() {
		if m.ID == id {
			return m.Pod.Name
		}
	}
	tr.t.Fatalf("no pod %v", id)
	return ""
}

func (tr *testRouter) podID(name string) kvindex.PodID {
	id, ok := tr.index.Pod(name)
	if !ok {
		tr.t.Fatalf("no pod %s", name)
	}
	return id
}

// TestHomesSharedBetweenReplicas: a prefix one replica homed is homed
// there by another replica that never saw it, with its footprint: that
// replica's first request of it goes home, not by cost as a first
// request; and that replica shares it on in turn.
func TestHomesSharedBetweenReplicas(t *testing.T) {
	one, two, all := rankedRouter(t, 100000), rankedRouter(t, 100000), rankedRouter(t, 100000)
	startSharing(one, two)
	two.loads(nil, map[string]int64{"a": 20, "c": 40}, 0) // b is two's cheapest pod, a 40 ms dearer
	two.fleet.Load("a").InFlight.Store(20)                // two's own requests
	two.fleet.Load("c").InFlight.Store(40)
	g := group(1, 4000)
	if pod := one.twice(g + " first?"); pod != "a" {
		t.Fatalf("one homed the group on %s, want a", pod)
	}
	all.twice(g + " first?")
	all.send(g + " second?")
	homes := share(one, two)
	if len(homes) != 1 || homes[0].Namespace != "llama" || homes[0].Tokens < 4000 || homes[0].Until != one.now().Add(time.Minute).UnixNano() {
		t.Fatalf("one shared %+v, want the group's home on a, its 4,000-odd tokens, lapsing in a minute", homes)
	}
	if got, _ := one.HomesChanged(nil, nil); len(got) != 0 {
		t.Fatalf("one's changes taken twice: %+v", got)
	}
	if pod := two.send(g + " second?"); pod != "a" {
		t.Fatalf("two routed the group to %s, want its shared home a (results %v)", pod, two.homeResults())
	}
	if r := two.homeResults(); r["home"] != 1 {
		t.Fatalf("two's home results = %v, want its first request of the group home", r)
	}
	// Two counts one's prompt and its own, as one router seeing both.
	homed, _ := two.Homed(two.podID("a"), two.fleet.Load("a"))
	want, _ := all.Homed(all.podID("a"), all.fleet.Load("a"))
	if homes[0].Tokens != 4004 || homed != want {
		t.Fatalf("one shared %d tokens; two counts %d homed on a, want 4,004 and %d (as one router seeing both prompts)", homes[0].Tokens, homed, want)
	}
	if back := share(two, one); len(back) != 1 || back[0].Pod != one.podID("a") {
		t.Fatalf("two shared %+v, want the group on a", back)
	}
}

// TestSharedHomesLastWriterWins: a prefix homed by both replicas at once
// keeps the home a replica set since its changes were taken, and takes
// the shared one once its own is shared and read back.
func TestSharedHomesLastWriterWins(t *testing.T) {
	one, two := rankedRouter(t, 100000), rankedRouter(t, 100000)
	startSharing(one, two)
	two.loads(map[string]int64{"a": 1, "c": 2}, nil, 0)
	g := group(2, 4000)
	one.twice(g + " one?")
	two.twice(g + " two?") // on b, not yet taken
	share(one, two)
	if got := two.homedOn(); got["b"] != 1 {
		t.Fatalf("two's homes = %v, want its own, not yet shared, kept on b", got)
	}
	share(two, one) // two wrote last
	if got := one.homedOn(); got["b"] != 1 || got["a"] != 0 {
		t.Fatalf("one's homes = %v, want the group moved to b, the last written", got)
	}
	homed, _ := one.Homed(one.podID("a"), one.fleet.Load("a"))
	if homed != 0 {
		t.Fatalf("a still counts %d tokens of the moved group", homed)
	}
}

// TestSharedHomesIgnoreLapsedAndUnknown: a shared home past its Until, or
// on a pod this replica's fleet lacks, is not taken.
func TestSharedHomesIgnoreLapsedAndUnknown(t *testing.T) {
	tr := rankedRouter(t, 100000)
	now := tr.now().UnixNano()
	tr.AdoptHomes([]replica.Home{
		{Namespace: "llama", Block: 1, Pod: tr.podID("a"), Tokens: 100, Until: now},
		{Namespace: "llama", Block: 2, Pod: kvindex.PodID(999), Tokens: 100, Until: now + 1},
		{Namespace: "llama", Block: 3, Pod: kvindex.InvalidPod, Tokens: 100, Until: now + 1},
	}, nil, nil, tr.now().Add(time.Minute))
	if got := tr.homedOn(); got["a"] != 0 || len(tr.homes.keys) != 30 {
		t.Fatalf("homes = %v (%d prefixes), want none taken", got, len(tr.homes.keys))
	}
}

// TestSharedHomesCountTheSharingReplicas: while the homes are shared, the
// requests the other sharing replicas have in flight count as this
// replica's: homes hold. Requests beyond those (a router that does not
// share) make them step aside, as does the sharing's lapse (the index
// stopped sharing).
func TestSharedHomesCountTheSharingReplicas(t *testing.T) {
	tr := rankedRouter(t, 100000)
	g := group(1, 4000)
	tr.twice(g + " first?")
	tr.store("b", g, "", "")
	tr.loads(map[string]int64{"a": 4}, map[string]int64{"b": 3}, 0) // 7 running or waiting, none of this replica's
	for _, p := range []string{"b", "c"} {
		tr.fleet.Load(p).KVCapacity.Store(4000) // no room: the home holds
	}
	tr.AdoptHomes(nil, nil, map[string]int64{"llama": 4, "qwen": 100}, tr.now().Add(time.Second))
	if pod := tr.send(g + " second?"); pod != "a" {
		t.Fatalf("with the other replica's 4 requests shared, the group went to %s, want its home a", pod)
	}
	tr.AdoptHomes(nil, nil, map[string]int64{"llama": 1, "qwen": 100}, tr.now().Add(time.Second))
	if pod := tr.send(g + " third?"); pod != "b" {
		t.Fatalf("with 6 requests of a router not sharing, the group went to %s, want b (the cheapest)", pod)
	}
	tr.AdoptHomes(nil, nil, map[string]int64{"llama": 4}, tr.now().Add(time.Second))
	if g := testutil.ToFloat64(tr.homes.shared); g != 1 {
		t.Fatalf("homes_shared = %v while shared, want 1", g)
	}
	tr.advance(time.Second)
	if g := testutil.ToFloat64(tr.homes.shared); g != 0 {
		t.Fatalf("homes_shared = %v once the sharing lapsed, want 0", g)
	}
	if pod := tr.send(g + " fourth?"); pod != "b" {
		t.Fatalf("with the sharing lapsed, the group went to %s, want b (the cheapest)", pod)
	}
	if r := tr.homeResults(); r["others"] != 2 || r["home"] != 1 {
		t.Fatalf("home results = %v, want home once, then others twice", r)
	}
	tr.fleet.Load("a").InFlight.Store(2)
	tr.fleet.Load("d").InFlight.Store(5)
	if n := tr.HomesInFlight("llama"); n != 2 {
		t.Fatalf("HomesInFlight(llama) = %d, want a's 2 (d serves qwen)", n)
	}
}

// TestSharedFootprintsCountEveryReplicasPrompts: with the homes shared,
// each replica counts the distinct prompts both saw, as one router seeing
// them all would: not only its own, nor both counts summed.
func TestSharedFootprintsCountEveryReplicasPrompts(t *testing.T) {
	one, two, all := rankedRouter(t, 100000), rankedRouter(t, 100000), rankedRouter(t, 100000)
	startSharing(one, two)
	g := group(3, 4000)
	for _, q := range []string{" the first question?", " a second question, longer than the first one, by far?"} {
		one.send(g + q)
		all.send(g + q)
	}
	third := " and a third, about something else altogether, at some length, to add blocks?"
	two.send(g + third)
	all.send(g + third)
	share(one, two)
	share(two, one)
	a := func(tr *testRouter) int64 {
		homed, _ := tr.Homed(tr.podID("a"), tr.fleet.Load("a"))
		return homed
	}
	want := a(all)
	if own := len(g + third); want <= int64(own) {
		t.Fatalf("one router counts %d tokens, want more than one prompt's %d", want, own)
	}
	if got := a(one); got != want {
		t.Errorf("one counts %d tokens homed on a, want %d, as one router seeing every prompt", got, want)
	}
	if got := a(two); got < want-homeStride*4 || got > want+homeStride*4 {
		t.Errorf("two counts %d tokens homed on a, want %d to within %d blocks (it saw the prompts in another order)", got, want, homeStride)
	}
}

// BenchmarkAdoptHomes is a sync's adoption of 1,000 other replicas'
// prompts of 4,000 tokens (1,000 blocks) under 250 prefixes, and of those
// prefixes' homes: what a busy fleet's 250 ms brings. AdoptHomes holds the
// decisions' lock adoptBatch items at a time.
func BenchmarkAdoptHomes(b *testing.B) {
	tr := rankedRouter(b, 1<<30)
	var tails []replica.HomeTail
	var homes []replica.Home
	for i := range 1000 {
		_, hs := tr.blocks("a", group(i%250, 4000)+fmt.Sprintf(" question %d?", i), "", "")
		tails = append(tails, replica.HomeTail{Namespace: "llama", Block: hs[0], Blocks: len(hs), BlockSize: 4, Signature: signature(nil, hs)})
		if i < 250 {
			homes = append(homes, replica.Home{Namespace: "llama", Block: hs[0], Pod: tr.podID("a"), Tokens: 4000, Until: tr.now().Add(time.Minute).UnixNano()})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.homes.mu.Lock()
		for _, h := range tr.homes.keys {
			tr.homes.remove(h)
		}
		tr.homes.mu.Unlock()
		tr.AdoptHomes(homes, tails, nil, tr.now().Add(time.Second))
	}
}

// TestUnsharedHomesKeepNoChanges: a router whose homes no index shares
// (the memory backend) keeps no changes or tails for one: nothing would
// take them.
func TestUnsharedHomesKeepNoChanges(t *testing.T) {
	tr := rankedRouter(t, 100000)
	for i := range 3 {
		tr.twice(group(i, 4000))
		tr.send(group(i, 4000) + " and a question?")
	}
	if n, m := len(tr.homes.changed), len(tr.homes.tails); n != 0 || m != 0 {
		t.Fatalf("%d changes and %d tails kept with nothing sharing them", n, m)
	}
	startSharing(tr)
	tr.send(group(0, 4000) + " another question?")
	if homes, tails := tr.HomesChanged(nil, nil); len(homes) != 1 || len(tails) != 1 {
		t.Fatalf("while shared: %d homes and %d tails changed, want the prefix's home and its new prompt", len(homes), len(tails))
	}
}

// TestSharedHomesMoveLater: while the homes are shared, a prefix moves
// off its pod only once the pod's homes pass its fill by
// sharedMoveSlack; unshared, as soon as they pass it.
func TestSharedHomesMoveLater(t *testing.T) {
	for _, shared := range []bool{false, true} {
		tr := rankedRouter(t, 10000) // 8,000 tokens of homes a pod
		if shared {
			startSharing(tr)
		}
		a, b := group(1, 4000), group(2, 3000)
		tr.twice(a)
		tr.twice(b)
		tr.store("a", b, "", "")
		tr.send(b + strings.Repeat(" a new question", 40))   // +560 tokens: a's homes 7,560
		tr.send(b + strings.Repeat(" another question", 40)) // +680: 8,240, past 8,000, within 8,800
		if got, moved := tr.homedOn(), tr.homeResults()["moved"]; shared != (got["a"] == 2 && moved == 0) {
			t.Fatalf("shared %v: homes %v, %v moved; want both still on a only while shared", shared, got, moved)
		}
	}
}
