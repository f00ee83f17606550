package kvindex

import "testing"

// checkInvariants verifies the internal links of every shard: each node's
// holders point back to it, each pod list is doubly linked and holds exactly
// the pod's holders of its kind, the speculative FIFOs are in deadline
// order, a pod has at most one speculative holder per block, and the counts
// add up.
func checkInvariants(t testing.TB, x *Index) {
	t.Helper()
	for si, s := range x.shards {
		s.mu.Lock()
		onNodes := map[ref]bool{}
		reals, spec := 0, 0
		mask := len(s.mu.slots) - 1
		if pub := *s.table.Load(); len(pub) != len(s.mu.slots) || &pub[0] != &s.mu.slots[0] {
			t.Fatalf("shard %d: the table published for prefetching has %d slots, not the shard's %d", si, len(pub), len(s.mu.slots))
		}
		for pos, sl := range s.mu.slots {
			if sl == 0 {
				continue
			}
			nr := s.bits.ref(sl)
			if int(nr) > x.limit {
				t.Fatalf("shard %d: node ref %d beyond the shard's %d entries", si, nr, x.limit)
			}
			nd := s.nodeLocked(nr)
			if !s.bits.matches(sl, nd.hash()) {
				t.Fatalf("shard %d: slot %#x of node %d does not carry the tag of its hash %#x", si, sl, nr, nd.hash())
			}
			if d, want := s.bits.disp(sl), min(uint32((pos-home(nd.hash(), mask))&mask), s.bits.dispMax); d != want {
				t.Fatalf("shard %d: slot %#x at %d says %d places from home, want %d", si, sl, pos, d, want)
			}
			all := s.capacityLocked(nd)
			n := inUse(all)
			if n == 0 || n > 1<<nd.class() || nd.class() > 0 && n <= 1<<nd.class()/4 {
				t.Fatalf("shard %d: node %d has %d holders in class %d", si, nr, n, nd.class())
			}
			for i, h := range all[n:] {
				if h != (holder{}) {
					t.Fatalf("shard %d: node %d has holder %d in use after its %d", si, nr, n+i, n)
				}
			}
			if _, got := s.lookupLocked(nd.hash()); got != nr {
				t.Fatalf("shard %d: lookup of node %d's hash finds %d", si, nr, got)
			}
			v := s.vectorLocked(nr)
			for i, h := range v {
				r := holderRef(nd.class(), nd.first()+uint32(i))
				for _, o := range v[:i] {
					if h.spec() && o.spec() && o.slot() == h.slot() {
						t.Fatalf("shard %d: node %d has two speculative holders of pod %d", si, nr, h.slot())
					}
				}
				if h.node != nr {
					t.Fatalf("shard %d: holder %x of node %d points to node %d", si, r, nr, h.node)
				}
				onNodes[r] = true
				if h.spec() {
					spec++
				} else {
					reals++
				}
			}
		}
		if reals != s.mu.real || spec != s.mu.spec {
			t.Fatalf("shard %d: counts real %d spec %d, holders real %d spec %d", si, s.mu.real, s.mu.spec, reals, spec)
		}
		onLists := 0
		for sl, ps := range s.mu.pods {
			if ps.n == 0 {
				if ps.lruOld|ps.lruNew|ps.specOld|ps.specNew|ps.graceOld|ps.graceNew != 0 {
					t.Fatalf("shard %d: pod %d without holders has lists %+v", si, sl, ps)
				}
				continue
			}
			n := 0
			for _, l := range []podList{listLRU, listPending, listGrace} {
				oldest, newest := ps.ends(l)
				n += checkList(t, s, uint32(sl), *oldest, *newest, l)
			}
			if uint32(n) != ps.n || n == 0 {
				t.Fatalf("shard %d: pod %d lists hold %d holders, state says %d", si, sl, n, ps.n)
			}
			if ps.lruOld != 0 && s.holderLocked(ps.lruOld).stamp != ps.oldStamp {
				t.Fatalf("shard %d: pod %d oldStamp %d, head stamp %d", si, sl, ps.oldStamp, s.holderLocked(ps.lruOld).stamp)
			}
			onLists += n
		}
		if onLists != len(onNodes) {
			t.Fatalf("shard %d: %d holders on nodes, %d on pod lists", si, len(onNodes), onLists)
		}
		checkOldest(t, si, s)
		s.mu.Unlock()
	}
}

// checkOldest verifies the tree of oldest LRU heads against a walk of every
// pod: each leaf says whether its pod has an LRU head, each inner node holds
// the older of its children, and the root is the pod with the oldest head.
func checkOldest(t testing.TB, si int, s *shard) {
	t.Helper()
	best, bestAge := int32(-1), uint32(0)
	for sl, ps := range s.mu.pods {
		if age := s.mu.stamp - ps.oldStamp; ps.lruOld != 0 && (best < 0 || age > bestAge) {
			best, bestAge = int32(sl), age
		}
	}
	tr := s.mu.oldest
	if len(tr) < 2 {
		if best >= 0 {
			t.Fatalf("shard %d: no tree of oldest heads, pod %d has one", si, best)
		}
		return
	}
	n := len(tr) / 2
	for sl := n; sl < len(s.mu.pods); sl++ {
		if s.mu.pods[sl].lruOld != 0 {
			t.Fatalf("shard %d: pod %d has an LRU head beyond the tree's %d leaves", si, sl, n)
		}
	}
	for i := range n {
		want := int32(-1)
		if i < len(s.mu.pods) && s.mu.pods[i].lruOld != 0 {
			want = int32(i)
		}
		if tr[n+i] != want {
			t.Fatalf("shard %d: leaf of pod %d is %d, want %d", si, i, tr[n+i], want)
		}
	}
	for i := n - 1; i >= 1; i-- {
		if want := s.olderLocked(tr[2*i], tr[2*i+1]); tr[i] != want {
			t.Fatalf("shard %d: tree node %d is pod %d, want %d", si, i, tr[i], want)
		}
	}
	if tr[1] != best {
		t.Fatalf("shard %d: tree says pod %d has the oldest head, the pods say %d", si, tr[1], best)
	}
}

func checkList(t testing.TB, s *shard, slot uint32, oldest, newest ref, l podList) int {
	t.Helper()
	n := 0
	var prev ref
	for r := oldest; r != 0; r = s.holderLocked(r).newer {
		h := s.holderLocked(r)
		if h.slot() != slot || h.list() != l || h.older != prev || h.node == 0 || (l == listLRU && h.count() == 0) {
			t.Fatalf("slot %d list %d: holder %x = %+v after %x", slot, l, r, *h, prev)
		}
		if l != listLRU && prev != 0 && int32(h.stamp-s.holderLocked(prev).stamp) < 0 {
			t.Fatalf("slot %d list %d: deadline %d after %d: the FIFO is out of order", slot, l, h.stamp, s.holderLocked(prev).stamp)
		}
		prev = r
		if n++; n > 1<<24 {
			t.Fatalf("slot %d list loops", slot)
		}
	}
	if prev != newest {
		t.Fatalf("slot %d list %d ends at %x, newest says %x", slot, l, prev, newest)
	}
	return n
}
