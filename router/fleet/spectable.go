package fleet

// specTable maps block hashes to their specCount: open addressing with
// linear probing over a power-of-two array, a slot empty where its count's
// n is 0 (a ledger keeps only blocks some decision in flight claimed).
// Block hashes are uniform already, so a multiply spreads them; a Go map
// hashed every one again and cost a decision of a long prompt twice as
// much.
type specTable struct {
	slots []specSlot
	n     int // occupied slots
}

type specSlot struct {
	h uint64
	c specCount
}

const minSpecSlots = 64

// home is the slot h probes first in a table of mask+1 slots.
func (t *specTable) home(h uint64, mask int) int {
	return int((h*0x9e3779b97f4a7c15)>>32) & mask
}

// len is the number of blocks in the table.
func (t *specTable) len() int { return t.n }

// get returns the count of h, zero when absent.
func (t *specTable) get(h uint64) specCount {
	if t.n == 0 {
		return specCount{}
	}
	i, _ := t.find(h)
	return t.slots[i].c
}

// find returns h's slot, or the empty slot where it would go, and
// whether h is there. The table must have slots (upsert makes them).
func (t *specTable) find(h uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(h, mask); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.c.n == 0 {
			return i, false
		}
		if s.h == h {
			return i, true
		}
	}
}

// upsert returns the count of h to update in place, a zero one put in
// the table when h was absent: the caller must leave it with n > 0.
func (t *specTable) upsert(h uint64) *specCount {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(minSpecSlots, 2*len(t.slots)))
	}
	i, ok := t.find(h)
	if !ok {
		t.slots[i].h = h
		t.n++
	}
	return &t.slots[i].c
}

// remove deletes slot i, shifting later slots of its probe run back so
// that lookups still find them.
func (t *specTable) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].c.n != 0; j = (j + 1) & mask {
		k := t.home(t.slots[j].h, mask)
		// Move slot j to i unless its home lies cyclically in (i, j].
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = specSlot{}
	t.n--
}

func (t *specTable) resize(n int) {
	old := t.slots
	t.slots = make([]specSlot, n)
	mask := n - 1
	for _, s := range old {
		if s.c.n == 0 {
			continue
		}
		i := t.home(s.h, mask)
		for t.slots[i].c.n != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
