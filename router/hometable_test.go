package router

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHomeGrowCountsDistinctTails: a prefix's footprint grows by each
// prompt's blocks past the longest prefix seen under it, to within
// homeStride blocks, and not at all for a prompt seen before.
func TestHomeGrowCountsDistinctTails(t *testing.T) {
	chain := func(from, n int, prefix ...uint64) []uint64 {
		out := append([]uint64(nil), prefix...)
		for i := range n {
			out = append(out, uint64(from+i))
		}
		return out
	}
	var h home
	base := chain(1, 40)
	tests := []struct {
		name   string
		hashes []uint64
		exact  int // the blocks not seen before
	}{
		{"first prompt", base, 40},
		{"again", base, 0},
		{"its prefix", base[:20], 0},
		{"an extension", chain(1000, 10, base...), 10},
		{"a sibling after 32 blocks", chain(2000, 8, base[:32]...), 8},
		{"a sibling after 5 blocks", chain(3000, 30, base[:5]...), 30},
	}
	for _, tt := range tests {
		got := h.grow(len(tt.hashes), signature(nil, tt.hashes))
		if got < tt.exact || got >= tt.exact+homeStride {
			t.Errorf("%s: grew %d blocks, want %d to within %d", tt.name, got, tt.exact, homeStride)
		}
	}
}

// TestHomesExpireAndAreBounded: a prefix unseen for routing.home_idle
// leaves the table and its footprint its home's; past the table's bound
// the least recently seen leaves.
func TestHomesExpireAndAreBounded(t *testing.T) {
	tr := homesRouter(t, 100000)
	tr.cfg.Tuning.HomeTable = 2
	tr.twice(group(1, 400))
	tr.advance(tr.cfg.Tuning.HomeIdle + time.Second)
	tr.twice(group(2, 400))
	if n := len(tr.homes.keys); n != 1 {
		t.Fatalf("%d prefixes after one idled out, want 1", n)
	}
	if sum := homedTokens(tr); sum != 400 || tr.homes.active != 400 {
		t.Fatalf("homed tokens = %d, seen twice %d; want the live prefix's 400", sum, tr.homes.active)
	}
	tr.twice(group(3, 400))
	tr.twice(group(4, 400))
	if n := len(tr.homes.keys); n != 2 {
		t.Fatalf("%d prefixes in a table of 2", n)
	}
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, group(2, 400))}]; ok {
		t.Fatal("the least recently seen prefix stayed past the bound")
	}
	if sum := homedTokens(tr); sum != 800 || tr.homes.active != 800 {
		t.Fatalf("homed tokens = %d, seen twice %d; want 800", sum, tr.homes.active)
	}
	if n := testutil.ToFloat64(tr.homes.homes); n != 2 {
		t.Fatalf("homed_prefixes = %v, want 2", n)
	}
}

// TestAnIdlePrefixStaysWhileItsHomeHoldsIt: a prefix unseen for
// routing.home_idle whose home still holds its first block stays, homed
// there but idle (its footprint out of its home's and of the active
// total until it returns), and is looked at again each home_idle; it
// leaves once its home has evicted the block, or homes more than it may
// fill with it.
func TestAnIdlePrefixStaysWhileItsHomeHoldsIt(t *testing.T) {
	tr := homesRouter(t, 100000)
	p1, p2, p3 := group(1, 400), group(2, 400), group(3, 400)
	home := tr.twice(p1)
	tr.store(home, p1, "", "")
	idle := func() { // a home_idle passes; another prefix's request looks
		tr.advance(tr.cfg.Tuning.HomeIdle + time.Second)
		tr.send(p3)
	}
	idle()
	if got := tr.homedOn()[home]; got != 1 || homedTokens(tr) != 0 || tr.homes.active != 0 {
		t.Fatalf("after a home_idle: %d prefixes homed on %s, %d tokens homed, %d seen twice; want p1 kept, idle: 0 and 0", got, home, homedTokens(tr), tr.homes.active)
	}
	for _, p := range []string{"a", "b", "c"} {
		if p != home {
			tr.store(p, p1, "", "") // a copy elsewhere: p1 still goes home
		}
	}
	before := tr.homeResults()["home"]
	if pod := tr.send(p1); pod != home || tr.homeResults()["home"] != before+1 {
		t.Fatalf("p1's return went to %s (home results %v), want its home %s", pod, tr.homeResults(), home)
	}
	if homedTokens(tr) != 400 || tr.homes.active != 400 {
		t.Fatalf("p1 back: %d tokens homed, %d seen twice; want 400 and 400", homedTokens(tr), tr.homes.active)
	}

	tr.twice(p2) // no pod stores it
	idle()
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, p2)}]; ok {
		t.Fatal("p2, which its home never held, stayed past home_idle")
	}
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, p1)}]; !ok {
		t.Fatal("p1, still held by its home, left")
	}

	tr.fleet.Load(home).KVCapacity.Store(400) // homes may fill 320 tokens there: p1's 400 is past it
	idle()
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, p1)}]; ok {
		t.Fatal("p1 stayed idle on a home whose prefixes passed its bound")
	}
	if homedTokens(tr) != 0 || tr.homes.active != 0 {
		t.Fatalf("p1 left idle: %d tokens homed, %d seen twice; want 0 and 0", homedTokens(tr), tr.homes.active)
	}
	tr.fleet.Load(home).KVCapacity.Store(100000)
	tr.twice(p1)
	for _, p := range []string{"a", "b", "c"} {
		tr.evict(p, p1)
	}
	idle()
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, p1)}]; ok {
		t.Fatal("p1 stayed past home_idle once no pod held it")
	}
}

// TestHomesMarksAreBounded: past the table's budget of marks the least
// recently seen prefixes leave, whatever the table's bound on prefixes.
func TestHomesMarksAreBounded(t *testing.T) {
	tr := homesRouter(t, 1000000)
	tr.homes.markBudget = 100
	for i := range 3 {
		tr.twice(group(i, 2560)) // 640 blocks: 40 marks
	}
	if n, m := len(tr.homes.keys), tr.homes.marks; n != 2 || m != 80 {
		t.Fatalf("%d prefixes with %d marks, want the latest 2 with 80 (a budget of 100)", n, m)
	}
	if _, ok := tr.homes.keys[homeKey{"llama", firstBlock(tr, group(0, 2560))}]; ok {
		t.Fatal("the least recently seen prefix stayed past the budget")
	}
}

func homedTokens(tr *testRouter) int64 {
	var sum int64
	for _, v := range tr.homes.homed {
		sum += v
	}
	return sum
}

func firstBlock(tr *testRouter, prompt string) uint64 {
	_, hs := tr.blocks("a", prompt, "", "")
	return hs[0]
}
