package redisindex

import (
	"sync"
	"time"
)

// ttlCache remembers when this replica last refreshed block keys' TTLs,
// direct-mapped (a collision only costs a refresh): the appends to a hot
// key, one every decision's speculation writes, refresh it once per TTL/4,
// not each time.
type ttlCache struct {
	sync.Mutex
	slots []ttlSlot
	last  map[specKey]specWrites // coalesce's scratch
	// scratch is appendNow's group, for the round trips made outside the
	// group writer.
	scratch group
}

type ttlSlot struct {
	key uint64
	at  int64 // unix ms
}

// ttlSlots is the cache's size: 1 MiB.
const ttlSlots = 1 << 16

// refresh reports whether key's TTL is due (not refreshed within every),
// noting that it will be.
func (c *ttlCache) refresh(key uint64, now time.Time, every time.Duration) bool {
	if c.slots == nil {
		c.slots = make([]ttlSlot, ttlSlots)
	}
	key = mix(key)
	s := &c.slots[key%ttlSlots]
	ms := now.UnixMilli()
	if s.key == key && ms-s.at < every.Milliseconds() {
		return false
	}
	s.key, s.at = key, ms
	return true
}

// mix spreads a 64-bit key's bits (the finalizer of MurmurHash3).
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	return k ^ k>>33
}

// prepare decides, for each block of g, whether its append is left out
// (coalesce) and whether its TTL is refreshed with it: unless this replica
// refreshed it less than TTL/4 ago (ttlCache); a key an append created
// gets its TTL in a second pipeline when it was not refreshed in the
// first. With no TTL (Config.TTL 0) a block is one APPEND.
func (x *Index) prepare(g *group) {
	x.ttls.Lock()
	defer x.ttls.Unlock()
	x.prepareLocked(g)
}

func (x *Index) prepareLocked(g *group) {
	now := time.Now() // Redis's clock, not the injected one
	g.at = now.Add(x.cfg.TTL)
	x.coalesce(g)
	g.set = g.set[:0]
	i := 0
	for _, r := range g.batch {
		tag := fnv1a(r.tag) // keys the TTL cache with each block's hash
		for _, h := range r.hashes {
			g.set = append(g.set, x.cfg.TTL != 0 && !g.skip[i] && x.ttls.refresh(tag^h, now, x.cfg.TTL/4))
			i++
		}
	}
}
