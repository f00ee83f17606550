package kvevents

import (
	"fmt"
	"testing"
)

// TestSubscriberFirstBatchLost follows a pod whose replay is empty when the
// subscriber connects: the rank's first batch (seq 0) is then lost on the
// wire and seq 1 arrives live. The stream expects seq 0 after an empty
// replay from 0, so seq 1 is a gap, replayed and counted.
func TestSubscriberFirstBatchLost(t *testing.T) {
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	eventually(t, "connection", func() bool { return f.connected("pod-a") })
	eventually(t, "the idle replay", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 2 })
	p.lose(t, 1)    // seq 0, kept in the replay buffer only
	p.publish(t, 2) // seq 1, live
	f.waitHashes("pod-a", 1, 2)
	if got := f.counter(f.mgr.metrics.gaps, "pod-a"); got != 1 {
		t.Errorf("gaps = %v, want 1", got)
	}
	eventually(t, "last_seq 1", func() bool { return lastSeq(f, "pod-a") == 1 },
		func() string { return fmt.Sprintf("last_seq = %v", lastSeq(f, "pod-a")) })
}

func lastSeq(f *fleet, name string) int64 {
	for _, st := range f.mgr.Status() {
		if st.Name == name && len(st.Ranks) > 0 {
			return st.Ranks[0].LastSeq
		}
	}
	return -1
}
