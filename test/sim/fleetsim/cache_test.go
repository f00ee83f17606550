package fleetsim

import (
	"fmt"
	"slices"
	"testing"
)

// fill allocates len(hashes) blocks and caches them under hashes.
func fill(t *testing.T, c *cache, hashes ...uint64) []int32 {
	t.Helper()
	ids, ok := c.allocate(nil, len(hashes))
	if !ok {
		t.Fatalf("allocate(%d) with %d free failed", len(hashes), c.free)
	}
	for k, h := range hashes {
		c.commit(ids[k], h)
	}
	return ids
}

func eventsString(ev []kvEvent) string {
	var s []string
	for _, e := range ev {
		op := "-"
		if e.stored {
			op = "+"
		}
		s = append(s, fmt.Sprintf("%s%d", op, e.hash))
	}
	return fmt.Sprint(s)
}

func TestCacheEvictsOldestFreedTailFirst(t *testing.T) {
	c := newCache(4)
	a := fill(t, c, 10, 11)
	c.release(a)
	b := fill(t, c, 20, 21)
	c.release(b)
	if got, want := eventsString(c.drain()), "[+10 +11 +20 +21]"; got != want {
		t.Fatalf("events of two requests = %s, want %s", got, want)
	}
	if got := c.hits([]uint64{10, 11}); got != 2 {
		t.Fatalf("hits(10 11) after release = %d, want 2: freed blocks stay cached", got)
	}
	for _, want := range []string{"[-11]", "[-10]", "[-21]", "[-20]"} {
		if _, ok := c.allocate(nil, 1); !ok {
			t.Fatal("allocate(1) failed on a cache of free blocks")
		}
		if got := eventsString(c.drain()); got != want {
			t.Fatalf("next eviction = %s, want %s (oldest request first, its tail before its head)", got, want)
		}
	}
	if _, ok := c.allocate(nil, 1); ok {
		t.Fatal("allocate(1) on a full cache succeeded")
	}
}

func TestCacheHitProtectsAndRefreshes(t *testing.T) {
	c := newCache(4)
	c.release(fill(t, c, 10, 11))
	c.release(fill(t, c, 20, 21))
	if got := c.hits([]uint64{10, 11, 12}); got != 2 {
		t.Fatalf("hits(10 11 12) = %d, want 2", got)
	}
	held := c.acquire(nil, []uint64{10, 11})
	if c.free != 2 || c.usage() != 0.5 {
		t.Fatalf("after a hit on 2 blocks: free %d, usage %v, want 2, 0.5", c.free, c.usage())
	}
	if _, ok := c.allocate(nil, 3); ok {
		t.Fatal("allocate(3) took a referenced block")
	}
	c.release(held) // now the most recently freed
	c.drain()
	if _, ok := c.allocate(nil, 2); !ok {
		t.Fatal("allocate(2) failed")
	}
	if got, want := eventsString(c.drain()), "[-21 -20]"; got != want {
		t.Fatalf("evictions after the hit = %s, want %s", got, want)
	}
}

func TestCacheKeepsFirstOfDuplicateHash(t *testing.T) {
	c := newCache(4)
	a := fill(t, c, 10)
	b := fill(t, c, 10)
	if got, want := eventsString(c.drain()), "[+10]"; got != want {
		t.Fatalf("events of a hash cached twice = %s, want %s", got, want)
	}
	c.release(b)
	c.release(a)
	c.allocate(nil, 3) // the two never-used blocks, then b's uncached one
	if got := eventsString(c.drain()); got != "[]" {
		t.Fatalf("evicting the uncached duplicate emitted %s, want nothing", got)
	}
	if c.hits([]uint64{10}) != 1 {
		t.Fatal("hash 10 lost with its duplicate")
	}
}

func TestBoundHits(t *testing.T) {
	w := &Workload{BlockSize: 16, Levels: []Level{{Name: "x", End: 10}}}
	add := func(hashes ...uint64) {
		w.Requests = append(w.Requests, Request{ID: len(w.Requests), Prompt: 16*len(hashes) + 1, Output: 1, Hashes: hashes})
	}
	add(1, 2)    // miss
	add(1, 2, 3) // 2 hits
	add(4, 5)    // evicts 3, then 2 (capacity 3)
	add(1, 2, 3) // 1 survives
	if got, want := BoundHits(w, 3), []int{0, 2, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("BoundHits = %v, want %v", got, want)
	}
}

func TestLRU(t *testing.T) {
	l := newLRU(2)
	l.add(1)
	l.add(2)
	l.add(1) // refresh: 2 is now the oldest
	l.add(3)
	if !l.has(1) || l.has(2) || !l.has(3) {
		t.Fatalf("lru after adds 1 2 1 3 (cap 2): has 1 %v, 2 %v, 3 %v; want true false true", l.has(1), l.has(2), l.has(3))
	}
}
