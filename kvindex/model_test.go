package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// model is the reference the index is checked against: plain maps, no
// sharding, no eviction.
type model struct {
	now     int64            // ms
	ttl     int64            // pending speculative entries' lifetime
	grace   int64            // settled speculative entries' lifetime
	real    map[modelKey]int // count
	spec    map[modelKey]int64
	settled map[modelKey]bool // spec entries Settle shortened
	podNS   map[PodID]string
	removed map[PodID]bool
}

type modelKey struct {
	h    uint64
	pod  PodID
	tier Tier // TierGPU for speculative keys
}

func newModel(ttl, grace time.Duration) *model {
	return &model{
		ttl: ttl.Milliseconds(), grace: grace.Milliseconds(), real: map[modelKey]int{}, spec: map[modelKey]int64{}, settled: map[modelKey]bool{},
		podNS: map[PodID]string{}, removed: map[PodID]bool{},
	}
}

func (m *model) holdsReal(h uint64, pod PodID) bool {
	for t := range Tier(NumTiers) {
		if m.real[modelKey{h, pod, t}] > 0 {
			return true
		}
	}
	return false
}

func (m *model) stored(pod PodID, tier Tier, hs []uint64) {
	for _, h := range hs {
		if tier == TierGPU {
			delete(m.spec, modelKey{h, pod, TierGPU})
		}
		m.real[modelKey{h, pod, tier}]++
	}
}

func (m *model) removedOp(pod PodID, tier Tier, hs []uint64) {
	for _, h := range hs {
		k := modelKey{h, pod, tier}
		if m.real[k] > 1 {
			m.real[k]--
		} else {
			delete(m.real, k)
		}
	}
}

// speculate gives pod a speculative entry of every block, held for real
// or not, expiring ttl from now, whether or not it had one.
func (m *model) speculate(pod PodID, hs []uint64) {
	for _, h := range hs {
		k := modelKey{h, pod, TierGPU}
		m.spec[k] = m.now + m.ttl
		delete(m.settled, k)
	}
}

// settle makes pod's live speculative entries of hs expire at most grace
// from now.
func (m *model) settle(pod PodID, hs []uint64) {
	for _, h := range hs {
		k := modelKey{h, pod, TierGPU}
		if d, ok := m.spec[k]; ok && d > m.now && d > m.now+m.grace {
			m.spec[k] = m.now + m.grace
			m.settled[k] = true
		}
	}
}

func (m *model) clear(pod PodID, mask uint8) {
	for k := range m.real {
		if k.pod == pod && mask&(1<<k.tier) != 0 {
			delete(m.real, k)
		}
	}
	if mask&1 != 0 {
		for k := range m.spec {
			if k.pod == pod {
				delete(m.spec, k)
			}
		}
	}
}

func (m *model) match(ns string, hs []uint64, cands []PodID) []PodMatch {
	out := make([]PodMatch, len(cands))
	seen := map[PodID]bool{}
	for i, c := range cands {
		out[i].Pod = c
		if seen[c] || m.removed[c] || m.podNS[c] != ns {
			continue
		}
		seen[c] = true
		for _, h := range hs {
			best := Tier(NumTiers)
			for t := range Tier(NumTiers) {
				if m.real[modelKey{h, c, t}] > 0 {
					best = t
					break
				}
			}
			switch d, ok := m.spec[modelKey{h, c, TierGPU}]; {
			case best < NumTiers:
				out[i].Tiers[best]++
			case ok && d > m.now:
				out[i].Speculative++
			default:
				goto next
			}
			out[i].Blocks++
		}
	next:
	}
	return out
}

func (m *model) realEntries() int { return len(m.real) }

// opRunner applies a byte-coded operation sequence to an index and the
// model, checking them against each other after every match.
type opRunner struct {
	t    testing.TB
	x    *Index
	m    *model
	now  time.Time
	pods []PodID
	out  []PodMatch
	// What the checks saw, so a test can prove it exercised real matches.
	sawBlocks, sawSpec, sawCPU int
	sawSettled                 int // speculative blocks matched while settled
	lastSpec                   map[PodID][]uint64
}

var namespaces = []string{"llama", "qwen"}

func newOpRunner(t testing.TB, shards int) *opRunner {
	const ttl, grace = 12 * time.Millisecond, 4 * time.Millisecond
	r := &opRunner{t: t, m: newModel(ttl, grace), now: time.Unix(1000, 0), lastSpec: map[PodID][]uint64{}}
	cfg := Config{Shards: shards, MaxEntries: 1 << 30, SpeculativeTTL: ttl, SpeculativeGrace: grace, Now: func() time.Time { return r.now }}
	x, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.x = x
	for i := range 5 {
		ns := namespaces[i%2]
		id := x.AddPod(fmt.Sprintf("pod-%d", i), ns)
		r.pods = append(r.pods, id)
		r.m.podNS[id] = ns
	}
	return r
}

// run decodes ops from data: each op is 3 header bytes then a run of hashes.
func (r *opRunner) run(data []byte) {
	for len(data) >= 4 {
		op, pod, tier := data[0]%9, r.pods[int(data[1])%len(r.pods)], Tier(data[2]%2)
		n := 1 + int(data[3]%6)
		data = data[4:]
		n = min(n, len(data))
		hs := make([]uint64, n)
		for i := range n {
			hs[i] = uint64(data[i]) | uint64(data[i]%3)<<60
		}
		data = data[n:]
		if n == 0 {
			break
		}
		r.apply(op, pod, tier, hs)
	}
	r.check(nil)
}

func (r *opRunner) apply(op uint8, pod PodID, tier Tier, hs []uint64) {
	removed := r.m.removed[pod]
	var err error
	switch op {
	case 0, 1:
		err = r.x.Stored(pod, tier, hs)
		if !removed {
			r.m.stored(pod, tier, hs)
		}
	case 2:
		err = r.x.Removed(pod, tier, hs)
		if !removed {
			r.m.removedOp(pod, tier, hs)
		}
	case 3:
		r.lastSpec[pod] = hs
		err = r.x.Speculate(pod, hs)
		if !removed {
			r.m.speculate(pod, hs)
		}
	case 4:
		switch {
		case len(hs) == 1 && hs[0]%7 == 0:
			err = r.x.RemovePod(pod)
			if !removed {
				r.m.clear(pod, allTiers)
				r.m.removed[pod] = true
			}
		case hs[0]%2 == 0:
			err = r.x.ClearPod(pod)
			r.m.clear(pod, allTiers)
		default:
			err = r.x.ClearTier(pod, tier)
			r.m.clear(pod, 1<<tier)
		}
	case 5:
		d := time.Duration(hs[0]%8) * time.Millisecond
		r.now = r.now.Add(d)
		r.m.now += d.Milliseconds()
	case 6:
		if tier == 0 && r.lastSpec[pod] != nil {
			hs = r.lastSpec[pod] // as a decision settles what it speculated
		}
		err = r.x.Settle(pod, hs)
		if !removed {
			r.m.settle(pod, hs)
		}
		if tier == 0 {
			r.check(hs)
		}
	default:
		if tier == 0 && r.lastSpec[pod] != nil {
			hs = r.lastSpec[pod] // what a decision speculated, settled or not
		}
		r.check(hs)
	}
	if op != 5 && op < 7 && (err != nil) != removed {
		r.t.Fatalf("op %d on pod %d (removed %v) = %v", op, pod, removed, err)
	}
}

// check compares a match of hs (and of every single block) and the entry
// count with the model.
func (r *opRunner) check(hs []uint64) {
	r.t.Helper()
	cands := append(slices.Clone(r.pods), r.pods[0]) // a duplicate candidate too
	for _, ns := range namespaces {
		for _, q := range [][]uint64{hs, {0, 1, 2, 3, 4, 5}} {
			r.out = r.x.Match(ns, q, cands, r.out)
			if want := r.m.match(ns, q, cands); !slices.Equal(r.out, want) {
				r.t.Fatalf("Match(%s, %v) = %+v, want %+v", ns, q, r.out, want)
			}
			for _, m := range r.out {
				r.sawBlocks += m.Blocks
				r.sawSpec += m.Speculative
				r.sawCPU += m.Tiers[TierCPU]
			}
			for _, h := range q {
				for _, p := range r.pods {
					if k := (modelKey{h, p, TierGPU}); r.m.settled[k] && r.m.spec[k] > r.m.now && !r.m.holdsReal(h, p) {
						r.sawSettled++
					}
				}
			}
		}
	}
	checkInvariants(r.t, r.x)
	if got, _ := r.x.Len(); got != r.m.realEntries() {
		r.t.Fatalf("Len() real = %d, want %d", got, r.m.realEntries())
	}
}

func FuzzIndexOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3, 7, 0, 0, 3, 1, 2, 3})
	f.Add([]byte{3, 1, 0, 2, 5, 6, 7, 1, 0, 1, 5, 6, 5, 0, 0, 1, 9, 7, 1, 0, 2, 5, 6})
	f.Add([]byte{0, 2, 1, 5, 1, 2, 3, 4, 5, 6, 4, 2, 1, 0, 1, 7, 2, 0, 2, 1, 2})
	// Speculate, settle part of it, let time pass, speculate again.
	f.Add([]byte{3, 1, 0, 2, 5, 6, 7, 6, 1, 0, 0, 5, 5, 0, 0, 0, 2, 7, 1, 0, 2, 5, 6, 3, 1, 0, 1, 6, 5, 0, 0, 0, 4, 7, 1, 0, 1, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		newOpRunner(t, 2).run(data)
	})
}

// TestIndexAgainstModel runs long random operation sequences, covering table
// growth and deletion shifts, against the model.
func TestIndexAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		data := make([]byte, 20000)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		for _, shards := range []int{1, 4} {
			r := newOpRunner(t, shards)
			r.run(data)
			if r.sawBlocks == 0 || r.sawSpec == 0 || r.sawCPU == 0 || r.sawSettled == 0 {
				t.Fatalf("seed %d: the checks saw %d blocks, %d speculative (%d settled), %d on CPU: the sequence exercises too little",
					seed, r.sawBlocks, r.sawSpec, r.sawSettled, r.sawCPU)
			}
		}
	}
}
