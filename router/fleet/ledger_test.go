package fleet

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSpecLedger: Claim tells the blocks no decision in flight holds and
// those last told refresh or longer ago, or all of them when asked; Release tells the blocks the
// last decision holding them let go, and those never claimed; an emptied
// ledger holds nothing.
func TestSpecLedger(t *testing.T) {
	var l SpecLedger
	at := time.Unix(100, 0)
	const refresh = 15 * time.Second
	check := func(what string, got, want []uint64) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: told %v, want %v", what, got, want)
		}
	}
	check("first claim", l.Claim(nil, []uint64{1, 2, 3}, at, refresh, false, 0), []uint64{1, 2, 3})
	check("overlapping claim", l.Claim(nil, []uint64{1, 2, 4}, at.Add(time.Second), refresh, false, 0), []uint64{4})
	check("claim a refresh later", l.Claim(nil, []uint64{1, 3}, at.Add(refresh), refresh, false, 0), []uint64{1, 3})
	check("claim just short of the next", l.Claim(nil, []uint64{1}, at.Add(2*refresh-time.Millisecond), refresh, false, 0), nil)
	if n := l.Speculated(); n != 4 {
		t.Errorf("Speculated = %d, want 4", n)
	}
	// 1 is held by four decisions, 2 by two, 3 by two, 4 by one.
	first := []uint64{1, 2, 3}
	check("release the first", l.Release(first[:0], first), nil)
	check("release the second", l.Release(nil, []uint64{1, 2, 4}), []uint64{2, 4})
	check("release one never claimed", l.Release(nil, []uint64{9}), []uint64{9})
	check("release the third", l.Release(nil, []uint64{1, 3}), []uint64{3})
	check("release the last", l.Release(nil, []uint64{1}), []uint64{1})
	if n := l.Speculated(); n != 0 {
		t.Errorf("Speculated after every release = %d, want 0", n)
	}
	check("claim again", l.Claim(nil, []uint64{1}, at.Add(time.Minute), refresh, false, 0), []uint64{1})
	check("claim all", l.Claim(nil, []uint64{1, 2}, at.Add(time.Minute), refresh, true, 0), []uint64{1, 2})
	check("release both", l.Release(nil, []uint64{1, 2}), []uint64{2})
	l.Release(nil, []uint64{1})

	big := make([]uint64, ledgerKept+1)
	for i := range big {
		big[i] = uint64(i)
	}
	l.Claim(nil, big, at, refresh, false, 0)
	l.Release(nil, big)
	if l.blocks.slots != nil {
		t.Error("a ledger emptied after a burst of more than ledgerKept blocks kept its table")
	}
}

// TestSpecLedgerFresh: Fresh is the leading blocks whose last claim was
// marked after since; a block never claimed, or released by every
// decision, is not fresh, and neither is any after it.
func TestSpecLedgerFresh(t *testing.T) {
	var l SpecLedger
	at := time.Unix(100, 0)
	chain := []uint64{1, 2, 3, 4, 5, 6}
	if n := l.Fresh(chain, 0); n != 0 {
		t.Errorf("Fresh of an empty ledger = %d, want 0", n)
	}
	l.Claim(nil, chain[:4], at, time.Second, false, 100) // a whole prompt's head, at 100
	l.Claim(nil, chain[:2], at, time.Second, false, 300) // its first two blocks again, at 300
	for _, tt := range []struct {
		since int64
		want  int
	}{{0, 4}, {99, 4}, {100, 2}, {299, 2}, {300, 0}} {
		if n := l.Fresh(chain, tt.since); n != tt.want {
			t.Errorf("Fresh(since %d) = %d, want %d", tt.since, n, tt.want)
		}
	}
	if n := l.Fresh(chain[:3], 0); n != 3 {
		t.Errorf("Fresh of the first three = %d, want 3", n)
	}
	// A decision that read the clock before another claimed keeps no
	// older mark: the first two stay fresher than the next two.
	l.Claim(nil, chain[:2], at, time.Second, false, 200)
	if n := l.Fresh(chain, 250); n != 2 {
		t.Errorf("Fresh(since 250) after a late claim marked 200 = %d, want 2", n)
	}
	l.Release(nil, chain[:2])
	l.Release(nil, chain[:4])
	l.Release(nil, chain[:2])
	if n := l.Fresh(chain, 0); n != 0 {
		t.Errorf("Fresh after every release = %d, want 0", n)
	}
}

// TestMissShare: MissShare is 1 until the pod's prefix-cache counters show
// queries, then the share of the queried tokens missed since, old scrapes
// fading with MissHalfLife; a restart (counters going back) starts afresh,
// and a scrape without both counters changes nothing.
func TestMissShare(t *testing.T) {
	var l Load
	at := time.Unix(1000, 0)
	c := func(q, h float64) Counters {
		return Counters{CacheQueries: q, CacheHits: h, Has: HasCacheQueries | HasCacheHits}
	}
	check := func(when string, want float64) {
		t.Helper()
		if got := l.MissShare(); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: MissShare = %.6f, want %.6f", when, got, want)
		}
	}
	check("nothing scraped", 1)
	l.ObserveCache(at, c(5000, 4000))
	check("one scrape", 1)
	l.ObserveCache(at.Add(time.Second), c(6000, 4900)) // 1,000 queried, 900 hit
	check("a scrape later", 0.1)
	l.ObserveCache(at.Add(time.Second+MissHalfLife), c(7000, 4900)) // 1,000 queried, none hit, the first half as old
	check("a half-life later", 1-450.0/1500)
	l.ObserveCache(at.Add(2*MissHalfLife), Counters{PromptTokens: 9, Has: HasPromptTokens})
	check("a scrape without the cache's counters", 1-450.0/1500)
	l.ObserveCache(at.Add(2*MissHalfLife), c(8000, 100)) // restarted, its queries past the old count already
	check("restarted", 1-450.0/1500)
	l.ObserveCache(at.Add(2*MissHalfLife+time.Second), c(8000, 100))
	check("nothing queried since", 1-450.0/1500)
}

// TestSpecTableAgainstMap runs random claims and releases of a few hundred
// blocks (tables of 64 to 1,024 slots, so that probe runs collide and
// wrap) on a specTable and a Go map, and compares every block's count.
func TestSpecTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab specTable
	want := map[uint64]uint32{}
	keys := make([]uint64, 600)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	keys[0] = 0 // a hash of zero is a block like any other
	for step := range 200_000 {
		h := keys[rng.IntN(len(keys))]
		if rng.IntN(2) == 0 {
			tab.upsert(h).n++
			want[h]++
		} else if tab.len() == 0 {
			continue
		} else if i, ok := tab.find(h); ok {
			if tab.slots[i].c.n <= 1 {
				tab.remove(i)
				delete(want, h)
			} else {
				tab.slots[i].c.n--
				want[h]--
			}
		} else if want[h] != 0 {
			t.Fatalf("step %d: %#x not found, want count %d", step, h, want[h])
		}
		if tab.len() != len(want) {
			t.Fatalf("step %d: %d blocks, want %d", step, tab.len(), len(want))
		}
	}
	for _, h := range keys {
		if got := tab.get(h).n; got != want[h] {
			t.Errorf("%#x: count %d, want %d", h, got, want[h])
		}
	}
}

// BenchmarkSpecLedger512 claims and releases a 512-block prompt (an
// 8k-token chat's decision and its end) on a ledger where 64 other
// decisions' prompts are in flight.
func BenchmarkSpecLedger512(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	prompt := func() []uint64 {
		hs := make([]uint64, 512)
		for i := range hs {
			hs[i] = rng.Uint64()
		}
		return hs
	}
	var l SpecLedger
	at := time.Unix(100, 0)
	for range 64 {
		l.Claim(nil, prompt(), at, time.Second, false, 0)
	}
	hs, dst := prompt(), make([]uint64, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		dst = l.Claim(dst[:0], hs, at, time.Second, true, 0)
		dst = l.Release(dst[:0], hs)
	}
}
