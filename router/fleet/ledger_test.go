package fleet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSpecLedger: Claim tells the blocks no decision in flight holds and
// those last told refresh or longer ago, or all of them when asked; Release
// tells the blocks the last decision holding them let go, and those never
// claimed; an emptied ledger holds nothing.
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
	check("claim a refresh later", l.Claim(nil, []uint64{1, 2}, at.Add(refresh), refresh, false, 0), []uint64{1, 2})
	check("claim just short of the next", l.Claim(nil, []uint64{1}, at.Add(2*refresh-time.Millisecond), refresh, false, 0), nil)
	if n := l.Speculated(); n != 4 {
		t.Errorf("Speculated = %d, want 4", n)
	}
	// 1 is held by four decisions, 2 by three, 3 by one, 4 by one.
	first := []uint64{1, 2, 3}
	check("release the first", l.Release(first[:0], first), []uint64{3})
	check("release the second", l.Release(nil, []uint64{1, 2, 4}), []uint64{4})
	check("release one never claimed", l.Release(nil, []uint64{9}), []uint64{9})
	check("release the third", l.Release(nil, []uint64{1, 2}), []uint64{2})
	check("release the last", l.Release(nil, []uint64{1}), []uint64{1})
	if n := l.Speculated(); n != 0 {
		t.Errorf("Speculated after every release = %d, want 0", n)
	}
	check("claim again", l.Claim(nil, []uint64{1}, at.Add(time.Minute), refresh, false, 0), []uint64{1})
	check("claim all", l.Claim(nil, []uint64{1, 2}, at.Add(time.Minute), refresh, true, 0), []uint64{1, 2})
	check("release both", l.Release(nil, []uint64{1, 2}), []uint64{2})
	check("release the first again", l.Release(nil, []uint64{1}), []uint64{1})
	if l.chains.root.kids != nil || l.chains.blocks != 0 {
		t.Errorf("an emptied ledger keeps %d runs, %d blocks", len(l.chains.root.kids), l.chains.blocks)
	}
}

// TestSpecTreeRuns: a claim that ends or leaves a run splits it, and once
// the claims through both halves are the same again the halves join.
func TestSpecTreeRuns(t *testing.T) {
	var l SpecLedger
	at := time.Unix(100, 0)
	runs := func(what string, want ...int) {
		t.Helper()
		var got []int
		for r := &l.chains.root; len(r.kids) > 0; r = r.kids[0] {
			got = append(got, len(r.kids[0].hashes))
			if len(r.kids) > 1 {
				got = append(got, -len(r.kids))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: runs %v, want %v", what, got, want)
		}
	}
	long, short, other := []uint64{1, 2, 3, 4, 5, 6}, []uint64{1, 2, 3}, []uint64{1, 2, 7, 8}
	l.Claim(nil, long, at, time.Hour, false, 0)
	runs("one claim", 6)
	l.Claim(nil, short, at, time.Hour, false, 0)
	runs("a claim ending inside", 3, 3)
	l.Claim(nil, other, at, time.Hour, false, 0)
	runs("a claim leaving", 2, 1, -2, 3)
	l.Release(nil, other)
	runs("released the one leaving", 3, 3)
	l.Release(nil, short)
	runs("released the one ending inside", 6)
	if n := l.Speculated(); n != 6 {
		t.Errorf("Speculated = %d, want 6", n)
	}
	l.Release(nil, long)

	// A short run cut from a long prompt keeps only its own blocks.
	long = make([]uint64, 10_000)
	for i := range long {
		long[i] = uint64(100 + i)
	}
	l.Claim(nil, long, at, time.Hour, false, 0)
	l.Claim(nil, long[:1], at, time.Hour, false, 0)
	l.Release(nil, long)
	runs("a long prompt released, its first block held", 1)
	if err := checkRuns(&l.chains); err != nil {
		t.Error(err)
	}
}

// TestSpecTreeAgainstBlocks runs random claims, releases and Fresh
// queries of prompts that share prefixes (each block's hash made from the
// one before it, as a prompt's chain is) on a SpecLedger and on a model
// that counts every block alone, and requires the same blocks told, in
// the same order, and the same answers.
func TestSpecTreeAgainstBlocks(t *testing.T) {
	t.Run("claimed", func(t *testing.T) { specTreeAgainstBlocks(t, false) })
	// Releasing chains never claimed breaks the contract (a run may then
	// hold fewer claims than one continuing it); the ledger still answers
	// as the blocks counted alone would.
	t.Run("strays", func(t *testing.T) { specTreeAgainstBlocks(t, true) })
}

func specTreeAgainstBlocks(t *testing.T, strays bool) {
	rng := rand.New(rand.NewPCG(5, 6))
	var l SpecLedger
	m := blockModel{}
	chain := func() []uint64 {
		hs := make([]uint64, 1+rng.IntN(24))
		h := uint64(0)
		for i := range hs {
			ways := 3 // on from any block; more from the first, so that a run's continuations are indexed
			if i < 2 {
				ways = 2 * kidsIndexed
			}
			h = h*0x9e3779b97f4a7c15 + uint64(rng.IntN(ways)) + 1
			hs[i] = h
		}
		return hs
	}
	var flight [][]uint64
	now := time.Unix(1000, 0)
	const refresh = 50 * time.Millisecond
	for step := range 100_000 {
		now = now.Add(time.Duration(rng.IntN(4)) * time.Millisecond)
		switch op := rng.IntN(9); {
		case op < 3 || len(flight) == 0:
			hs, all, mark := chain(), rng.IntN(10) == 0, int64(rng.IntN(1000))
			got := l.Claim([]uint64{7}, hs, now, refresh, all, mark)
			want := append([]uint64{7}, m.claim(hs, now, refresh, all, mark)...)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: Claim(%v) told %v, want %v", step, hs, got, want)
			}
			flight = append(flight, hs)
		case op < 6:
			i := rng.IntN(len(flight))
			hs := flight[i]
			flight[i] = flight[len(flight)-1]
			flight = flight[:len(flight)-1]
			want := m.release(hs)
			dst := slices.Clone(hs)[:0]
			if step%2 == 0 {
				dst = hs[:0] // as the router settles: the released chain's own memory
			}
			if got := l.Release(dst, slices.Clone(hs)); !slices.Equal(got, want) {
				t.Fatalf("step %d: Release(%v) told %v, want %v", step, hs, got, want)
			}
		case op == 8 && strays: // a chain never claimed, released
			hs := chain()
			want := m.release(hs)
			if got := l.Release(nil, hs); !slices.Equal(got, want) {
				t.Fatalf("step %d: Release(%v) of a chain not claimed told %v, want %v", step, hs, got, want)
			}
		default:
			hs, since := chain(), int64(rng.IntN(1000))
			if got, want := l.Fresh(hs, since), m.fresh(hs, since); got != want {
				t.Fatalf("step %d: Fresh(%v, %d) = %d, want %d", step, hs, since, got, want)
			}
		}
		if got, want := l.Speculated(), len(m); got != want {
			t.Fatalf("step %d: Speculated = %d, want %d", step, got, want)
		}
		if err := checkRuns(&l.chains); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	for _, hs := range flight {
		l.Release(nil, hs)
	}
	if l.chains.root.kids != nil || l.chains.blocks != 0 {
		t.Errorf("after every release: %d runs, %d blocks", len(l.chains.root.kids), l.chains.blocks)
	}
}

// checkRuns checks that no run is empty or keeps more than three times
// its blocks' memory, that every run is indexed under its first hash when
// its parent indexes them, and that the spares are within their bounds.
func checkRuns(t *specTree) error {
	var check func(r *specRun) error
	check = func(r *specRun) error {
		if (r.byHash != nil || len(r.kids) > kidsIndexed) && len(r.byHash) != len(r.kids) {
			return fmt.Errorf("a run indexes %d of its %d continuations", len(r.byHash), len(r.kids))
		}
		for _, k := range r.kids {
			switch {
			case len(k.hashes) == 0:
				return errors.New("an empty run")
			case cap(k.hashes) > 3*len(k.hashes):
				return fmt.Errorf("a run of %d blocks keeps %d", len(k.hashes), cap(k.hashes))
			case r.byHash != nil && r.byHash[k.hashes[0]] != k:
				return fmt.Errorf("run %#x not indexed", k.hashes[0])
			}
			if err := check(k); err != nil {
				return err
			}
		}
		return nil
	}
	if len(t.spare) > spareRuns {
		return fmt.Errorf("%d spare runs", len(t.spare))
	}
	for _, r := range t.spare {
		if cap(r.hashes) > spareBlocks || len(r.kids) > 0 {
			return fmt.Errorf("a spare run of %d blocks, %d continuations", cap(r.hashes), len(r.kids))
		}
	}
	return check(&t.root)
}

// blockModel is the ledger's contract block by block.
type blockModel map[uint64]*specCount

func (m blockModel) claim(hashes []uint64, now time.Time, refresh time.Duration, all bool, mark int64) (told []uint64) {
	ms, every := now.UnixMilli(), refresh.Milliseconds()
	for _, h := range hashes {
		c := m[h]
		if c == nil {
			c = &specCount{}
			m[h] = c
		}
		if all || c.n == 0 || ms-c.told >= every {
			told = append(told, h)
			c.told = ms
		}
		c.n++
		c.mark = max(c.mark, mark)
	}
	return told
}

func (m blockModel) release(hashes []uint64) (told []uint64) {
	for _, h := range hashes {
		switch c := m[h]; {
		case c == nil:
			told = append(told, h)
		case c.n <= 1:
			delete(m, h)
			told = append(told, h)
		default:
			c.n--
		}
	}
	return told
}

func (m blockModel) fresh(hashes []uint64, since int64) int {
	for i, h := range hashes {
		if c := m[h]; c == nil || c.mark <= since {
			return i
		}
	}
	return len(hashes)
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
