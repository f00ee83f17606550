package fleet

import "slices"

// specTree holds a ledger's claimed chains as a tree of runs: each run is
// a stretch of consecutive blocks that the same decisions in flight
// claimed, so they share one specCount. A block's hash determines every
// block before it (a prompt's chain), so the claims through a block are
// the claims through its run, and a claim or release of a long prompt
// compares and copies its hashes in order instead of looking each up in a
// table: a cold 100k-token prompt's 6,400 blocks are a few runs.
//
// Runs are split where a claimed chain ends or leaves them, dropped when
// no claim holds them and none continues them, and joined to their only
// continuation when both have the same count again.
type specTree struct {
	root   specRun // holds no blocks: its kids are the chains' first runs
	blocks int     // blocks of the runs some claim holds
	path   []*specRun
	spare  []*specRun // dropped runs, whose memory new runs take
}

// spareRuns is the most dropped runs a tree keeps, and spareBlocks the
// longest: enough for the decisions in flight on a pod to claim new
// prompts without allocating.
const (
	spareRuns   = 4
	spareBlocks = 1 << 13
)

// specRun is a run of blocks and the claims through all of it.
type specRun struct {
	hashes []uint64
	c      specCount
	kids   []*specRun // the runs that continue this one, each with another first hash
	byHash map[uint64]*specRun
}

// kidsIndexed is how many continuations a run looks through in order
// before it indexes them by first hash (a prefix many prompts share).
const kidsIndexed = 8

// kid returns the run continuing r whose first hash is h, or nil.
func (r *specRun) kid(h uint64) *specRun {
	if r.byHash != nil {
		return r.byHash[h]
	}
	for _, k := range r.kids {
		if k.hashes[0] == h {
			return k
		}
	}
	return nil
}

func (r *specRun) addKid(k *specRun) {
	r.kids = append(r.kids, k)
	switch {
	case r.byHash != nil:
		r.byHash[k.hashes[0]] = k
	case len(r.kids) > kidsIndexed:
		r.byHash = make(map[uint64]*specRun, 2*len(r.kids))
		for _, k := range r.kids {
			r.byHash[k.hashes[0]] = k
		}
	}
}

func (r *specRun) dropKid(k *specRun) {
	i := slices.Index(r.kids, k)
	last := len(r.kids) - 1
	r.kids[i], r.kids[last] = r.kids[last], nil
	r.kids = r.kids[:last]
	switch {
	case len(r.kids) == 0:
		r.kids, r.byHash = nil, nil
	case r.byHash != nil:
		delete(r.byHash, k.hashes[0])
	}
}

// split cuts r after its first n blocks; the rest, with r's count and
// continuations, becomes r's only continuation. The rest is a copy, and
// so is the first part unless it fills half of r's memory: a run's blocks
// start its own array, and no run keeps more than about twice its blocks'
// memory alive (a short run cut from a long prompt would keep all of it).
func (r *specRun) split(n int) {
	rest := &specRun{hashes: slices.Clone(r.hashes[n:]), c: r.c, kids: r.kids, byHash: r.byHash}
	if r.hashes = r.hashes[:n]; 2*n < cap(r.hashes) {
		r.hashes = slices.Clone(r.hashes)
	}
	r.kids, r.byHash = []*specRun{rest}, nil
}

// common is the length of the longest common prefix of a and b.
func common(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// walk follows chain from the root, calling visit with each run it passes
// and how many of its blocks chain covers; a run chain covers in part is
// split first when split is set, so that every run visited is covered
// whole. It returns how many blocks of chain lie on runs.
func (t *specTree) walk(chain []uint64, split bool, visit func(r *specRun, n int) bool) int {
	r, i := &t.root, 0
	for i < len(chain) {
		k := r.kid(chain[i])
		if k == nil {
			break
		}
		n := common(k.hashes, chain[i:])
		if n < len(k.hashes) && split {
			k.split(n)
		}
		if !visit(k, n) {
			return i
		}
		i += n
		if n < len(k.hashes) {
			break
		}
		r = k
	}
	return i
}

// claim counts one more claim of chain and calls tell with each run of
// it and its count c as it was before the claim (zero for a run no claim
// held), so that the caller can decide what to tell and update c's other
// fields; the blocks after the tree's runs become a new run with count 1,
// passed to tell with a zero count.
func (t *specTree) claim(chain []uint64, tell func(hashes []uint64, c *specCount)) {
	last := &t.root
	i := t.walk(chain, true, func(r *specRun, _ int) bool {
		if r.c.n == 0 { // a run no claim holds: as if new
			r.c = specCount{}
			t.blocks += len(r.hashes)
		}
		tell(r.hashes, &r.c)
		r.c.n++
		last = r
		return true
	})
	if i == len(chain) {
		return
	}
	r := t.newRun(chain[i:])
	tell(r.hashes, &r.c)
	r.c.n = 1
	last.addKid(r)
	t.blocks += len(r.hashes)
}

// release takes one claim of chain off the runs it lies on, appends to dst
// the blocks no claim holds any more and those of chain on no run, and
// drops and joins runs as they empty.
func (t *specTree) release(dst, chain []uint64) []uint64 {
	t.path = append(t.path[:0], &t.root)
	i := t.walk(chain, true, func(r *specRun, _ int) bool {
		switch r.c.n {
		case 0: // held by no claim (a chain released that was not claimed): told as it was
			dst = append(dst, r.hashes...)
		case 1:
			r.c.n = 0
			dst = append(dst, r.hashes...)
			t.blocks -= len(r.hashes)
		default:
			r.c.n--
		}
		t.path = append(t.path, r)
		return true
	})
	dst = append(dst, chain[i:]...)
	for j := len(t.path) - 1; j > 0; j-- {
		r, parent := t.path[j], t.path[j-1]
		if r.c.n == 0 && len(r.kids) == 0 {
			parent.dropKid(r)
			t.keep(r)
			continue
		}
		if len(r.kids) == 1 && r.kids[0].c == r.c {
			k := r.kids[0]
			r.hashes = append(r.hashes, k.hashes...)
			r.kids, r.byHash = k.kids, k.byHash
		}
	}
	clear(t.path)
	return dst
}

// fresh is how many leading blocks of chain lie on runs that some claim
// holds, last claimed with a mark after since.
func (t *specTree) fresh(chain []uint64, since int64) int {
	n := 0
	t.walk(chain, false, func(r *specRun, covered int) bool {
		if r.c.n == 0 || r.c.mark <= since {
			return false
		}
		n += covered
		return true
	})
	return n
}

// newRun returns a run of a copy of hashes with a zero count, in the
// memory of a dropped run when it has room and is no more than twice as
// large. Runs never share memory (see split).
func (t *specTree) newRun(hashes []uint64) *specRun {
	for i, r := range t.spare {
		if c := cap(r.hashes); c >= len(hashes) && c <= 2*len(hashes) {
			last := len(t.spare) - 1
			t.spare[i], t.spare[last] = t.spare[last], nil
			t.spare = t.spare[:last]
			r.hashes = append(r.hashes[:0], hashes...)
			return r
		}
	}
	return &specRun{hashes: slices.Clone(hashes)}
}

// keep keeps a dropped run for newRun, in place of a shorter one when the
// spares are full.
func (t *specTree) keep(r *specRun) {
	if cap(r.hashes) > spareBlocks {
		return
	}
	*r = specRun{hashes: r.hashes[:0]}
	if len(t.spare) < spareRuns {
		t.spare = append(t.spare, r)
		return
	}
	for i, s := range t.spare {
		if cap(s.hashes) < cap(r.hashes) {
			t.spare[i] = r
			return
		}
	}
}
