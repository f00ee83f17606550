package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/kvindex"
)

// checkHomes has the homes' table check its bookkeeping each time its lock
// is released (homeTable.unlock), and panic on the first inconsistency.
// The package's tests turn it on (main_test.go); it costs a pass over the
// table.
var checkHomes bool

// unlock releases the table's lock, checking the table first when
// checkHomes is on.
func (t *homeTable) unlock() {
	if checkHomes {
		if err := t.checkLocked(); err != nil {
			panic("router: homes' bookkeeping: " + err.Error())
		}
	}
	t.mu.Unlock()
}

// checkLocked reports every way the table's totals disagree with its
// entries: each pod's homed total is the footprints of the active
// prefixes homed there; the active total the footprints of the active
// prefixes seen twice or more; each footprint the larger of its own and
// shared counts; the marks' total their sum; the LRU list and the key map
// the same entries. An idle prefix is homed and seen twice. Called with
// t.mu.
func (t *homeTable) checkLocked() error {
	var errs []error
	homed := map[kvindex.PodID]int64{}
	var active int64
	marks := 0
	for e := t.lru.Front(); e != nil; e = e.Next() {
		h := e.Value.(*home)
		if t.keys[h.key] != h || h.elem != e {
			errs = append(errs, fmt.Errorf("prefix %x: in the LRU list, not the key map", h.key.block))
		}
		if h.tokens != max(h.own, h.remote) {
			errs = append(errs, fmt.Errorf("prefix %x: footprint %d, own %d, shared %d", h.key.block, h.tokens, h.own, h.remote))
		}
		if h.idle && (h.pod == kvindex.InvalidPod || h.requests < 2) {
			errs = append(errs, fmt.Errorf("prefix %x: idle without a home or a second request", h.key.block))
		}
		marks += len(h.marks)
		if h.idle {
			continue
		}
		if h.pod != kvindex.InvalidPod {
			homed[h.pod] += h.tokens
		}
		if h.requests >= 2 {
			active += h.tokens
		}
	}
	if len(t.keys) != t.lru.Len() {
		errs = append(errs, fmt.Errorf("%d keys, %d in the LRU list", len(t.keys), t.lru.Len()))
	}
	for pod, n := range t.homed {
		if homed[pod] != n {
			errs = append(errs, fmt.Errorf("pod %d: homed total %d, its active prefixes' footprints %d", pod, n, homed[pod]))
		}
	}
	for pod, n := range homed {
		if _, ok := t.homed[pod]; !ok && n != 0 {
			errs = append(errs, fmt.Errorf("pod %d: no homed total, its active prefixes' footprints %d", pod, n))
		}
	}
	if active != t.active {
		errs = append(errs, fmt.Errorf("active total %d, the active prefixes seen twice %d", t.active, active))
	}
	if marks != t.marks {
		errs = append(errs, fmt.Errorf("marks total %d, the prefixes' marks %d", t.marks, marks))
	}
	return errors.Join(errs...)
}
