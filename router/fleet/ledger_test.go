package fleet

import (
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
	check("first claim", l.Claim(nil, []uint64{1, 2, 3}, at, refresh, false), []uint64{1, 2, 3})
	check("overlapping claim", l.Claim(nil, []uint64{1, 2, 4}, at.Add(time.Second), refresh, false), []uint64{4})
	check("claim a refresh later", l.Claim(nil, []uint64{1, 3}, at.Add(refresh), refresh, false), []uint64{1, 3})
	check("claim just short of the next", l.Claim(nil, []uint64{1}, at.Add(2*refresh-time.Millisecond), refresh, false), nil)
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
	check("claim again", l.Claim(nil, []uint64{1}, at.Add(time.Minute), refresh, false), []uint64{1})
	check("claim all", l.Claim(nil, []uint64{1, 2}, at.Add(time.Minute), refresh, true), []uint64{1, 2})
	check("release both", l.Release(nil, []uint64{1, 2}), []uint64{2})
	l.Release(nil, []uint64{1})

	big := make([]uint64, ledgerKept+1)
	for i := range big {
		big[i] = uint64(i)
	}
	l.Claim(nil, big, at, refresh, false)
	l.Release(nil, big)
	if l.blocks != nil {
		t.Error("a ledger emptied after a burst of more than ledgerKept blocks kept its map")
	}
}
