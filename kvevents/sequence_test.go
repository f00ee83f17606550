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
	f, p := followIdle(t)
	p.lose(t, 1)    // seq 0, kept in the replay buffer only
	p.publish(t, 2) // seq 1, live
	f.waitHashes("pod-a", 1, 2)
	if got := f.counter(f.mgr.metrics.gaps, "pod-a"); got != 1 {
		t.Errorf("gaps = %v, want 1", got)
	}
	eventually(t, "last_seq 1", func() bool { return lastSeq(f, "pod-a") == 1 },
		func() string { return fmt.Sprintf("last_seq = %v", lastSeq(f, "pod-a")) })
}

// followIdle starts a publisher with nothing published and follows it as
// pod-a, returning once the subscriber connected and made its idle replay.
func followIdle(t *testing.T) (*fleet, *pub) {
	t.Helper()
	checkGoroutines(t)
	p := startPub(t, 0, 0, 100)
	f := newFleet(t, testConfig())
	f.follow("pod-a", p)
	eventually(t, "connection", func() bool { return f.connected("pod-a") })
	eventually(t, "the idle replay", func() bool { return f.counter(f.mgr.metrics.replays, "pod-a", "ok") >= 2 })
	return f, p
}

func lastSeq(f *fleet, name string) int64 {
	for _, st := range f.mgr.Status() {
		if st.Name == name && len(st.Ranks) > 0 {
			return st.Ranks[0].LastSeq
		}
	}
	return -1
}

// TestSubscriberSequenceBackOnFirstConnection follows a publisher whose
// sequence goes from 1 back to 0 within the subscriber's first connection:
// the pod restarted, so its entries are cleared, the restart is counted
// once, and the new process is followed from its seq 0.
func TestSubscriberSequenceBackOnFirstConnection(t *testing.T) {
	f, p := followIdle(t)
	p.publish(t, 1) // seq 0
	p.publish(t, 2) // seq 1
	f.waitHashes("pod-a", 1, 2)
	if err := p.Reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.publish(t, 3) // seq 0 of the new process
	f.waitHashes("pod-a", 3)
	p.publish(t, 4) // seq 1
	f.waitHashes("pod-a", 3, 4)
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"restarts", f.counter(f.mgr.metrics.restarts, "pod-a"), 1},
		{"clears{restart}", f.counter(f.mgr.metrics.clears, "pod-a", "restart"), 1},
		{"gaps", f.counter(f.mgr.metrics.gaps, "pod-a"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
