package kvevents

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Index is the part of kvindex.Index the subscribers write to.
type Index interface {
	Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
	Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
	ClearPod(pod kvindex.PodID) error
}

// applier decodes one pod's batches and applies them to the index, in
// order. It is owned by the pod's applying goroutine.
type applier struct {
	idx    Index
	id     kvindex.PodID
	dec    *wire.Decoder
	verify *verifier
	m      *podMetrics
}

func newApplier(idx Index, id kvindex.PodID, v *verifier, m *podMetrics) *applier {
	return &applier{idx: idx, id: id, dec: wire.NewDecoder(), verify: v, m: m}
}

// applyPayload decodes and applies one batch.
func (a *applier) applyPayload(payload []byte) error {
	start := time.Now()
	b, err := a.dec.Decode(payload)
	if err != nil {
		a.m.decodeErrors.Inc()
		return err
	}
	if b.Skipped > 0 {
		a.m.ignored.Add(float64(b.Skipped))
	}
	err = a.apply(b)
	a.m.batches.Inc()
	a.m.applySeconds.Observe(time.Since(start).Seconds())
	return err
}

// apply applies the events of b in order.
func (a *applier) apply(b *wire.Batch) error {
	for i := range b.Events {
		e := &b.Events[i]
		if !e.PrefixReuse() {
			a.m.ignored.Inc()
			continue
		}
		var err error
		switch e.Type {
		case wire.BlockStored:
			if (len(e.Tokens) > 0 || e.BlockSize > 0) && !e.TokensMatch() {
				a.m.tokenMismatch.Inc()
			}
			err = a.idx.Stored(a.id, e.Tier(), e.Hashes)
			a.verify.observe(e)
		case wire.BlockRemoved:
			err = a.idx.Removed(a.id, e.Tier(), e.Hashes)
		case wire.AllBlocksCleared:
			err = a.idx.ClearPod(a.id)
			a.m.clearEvent.Inc()
		}
		if err != nil {
			return fmt.Errorf("kvevents: apply %v: %w", e.Type, err)
		}
		a.m.events[e.Type].Inc()
	}
	return nil
}

// clear removes every entry of the pod, for reason (a restart or a gap
// replay could not fill). After a restart the pod's hashes are verified
// afresh.
func (a *applier) clear(reason clearReason, log *slog.Logger, pod string) error {
	switch reason {
	case clearRestart:
		a.m.clearRestart.Inc()
		a.verify.reset()
	case clearExhausted:
		a.m.clearExhausted.Inc()
	}
	log.Warn("kvevents: clearing the pod's index entries", "pod", pod, "reason", reason.String())
	if err := a.idx.ClearPod(a.id); err != nil {
		return fmt.Errorf("kvevents: clear pod %s: %w", pod, err)
	}
	return nil
}

// clearReason says why a pod's entries must be cleared.
type clearReason uint8

const (
	clearNone      clearReason = iota
	clearRestart               // the publisher's sequence went backwards
	clearExhausted             // a gap older than the replay buffer
)

func (r clearReason) String() string {
	switch r {
	case clearRestart:
		return "restart"
	case clearExhausted:
		return "exhausted"
	default:
		return "none"
	}
}
