package kvevents

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/internal/tracing"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Index is the part of kvindex.Index the subscribers write to.
type Index interface {
	Stored(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
	Removed(pod kvindex.PodID, tier kvindex.Tier, hashes []uint64) error
	ClearPod(pod kvindex.PodID) error
}

// CacheClearer is an Index told when a pod's own cache was cleared (an
// AllBlocksCleared event, or its publisher restarted), after ClearPod:
// unlike the clears of entries this replica cannot vouch for (a gap its
// replay could not fill, a switch of hashes), what follows is then all the
// pod holds. The redis index uses it to know its view of a pod is as
// complete as any writer's (kvindex/redisindex).
type CacheClearer interface {
	CacheCleared(pod kvindex.PodID)
}

// GroupIndex is an Index told each pod's KV-cache groups, so that it
// prices a hybrid model's pods by the prefix every group serves
// (kvindex.Index.SetGroups).
type GroupIndex interface {
	SetGroups(pod kvindex.PodID, blockSize int, groups []kvindex.Group) error
}

// applier decodes one pod's batches and applies them to the index, in
// order. It is owned by the pod's applying goroutine.
type applier struct {
	idx    Index
	id     kvindex.PodID
	dec    *wire.Decoder
	verify *verifier
	rekey  *rekeyer // nil: rekeying off
	groups *groups
	m      *podMetrics
	pod    string    // the pod's name, for spans
	traced time.Time // when a batch was last traced
	// foreign: the pod's engine names blocks by ids of its own (SGLang,
	// TensorRT-LLM), so its blocks are always rekeyed, never verified.
	foreign bool
	// pending are stored keys not yet given to the index, in pendingTier.
	pending     []uint64
	pendingTier kvindex.Tier
	// The layout last given to the index (GroupIndex): the groups'
	// version, and whether the pod was rekeyed.
	layoutVersion uint64
	layoutRekeyed bool
}

func newApplier(idx Index, id kvindex.PodID, pod string, v *verifier, rk *rekeyer, g *groups, m *podMetrics) *applier {
	return &applier{idx: idx, id: id, pod: pod, dec: wire.NewDecoder(), verify: v, rekey: rk, groups: g, m: m}
}

// traceEvery is how often a pod's event batches are traced: one span a
// second per pod, whatever the rate of batches.
const traceEvery = time.Second

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
	end := time.Now()
	a.m.applySeconds.Observe(end.Sub(start).Seconds())
	if tracing.On() && end.Sub(a.traced) >= traceEvery {
		a.traced = end
		a.trace(start, end, len(b.Events), err)
	}
	return err
}

// trace records one batch's decoding and application as a root span
// kvrouter.events.batch.
func (a *applier) trace(start, end time.Time, events int, err error) {
	_, span := otel.Tracer("github.com/kvrouter/kvrouter/kvevents").Start(context.Background(), "kvrouter.events.batch",
		trace.WithTimestamp(start), trace.WithAttributes(attribute.String("kvrouter.pod", a.pod), attribute.Int("kvrouter.events", events)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// apply applies the events of b in order, those of KV-cache groups the
// index does not hold aside (counted by kind).
func (a *applier) apply(b *wire.Batch) error {
	for i := range b.Events {
		e := &b.Events[i]
		h, skip := a.groups.admit(e)
		if h == holdKeyed && a.rekeyed() {
			h = holdNone // its hashes are the pod's, its full-attention blocks kvrouter's
		}
		var err error
		if h != holdRaw || e.Type != wire.BlockStored {
			err = a.flush() // stores wait only for stores
		}
		switch {
		case err != nil:
		case h == holdNone:
			a.m.groupSkipped[skip].Inc()
			continue
		case h == holdKeyed:
			err = a.keyed(e)
		case e.Type == wire.BlockStored:
			if (len(e.Tokens) > 0 || e.BlockSize > 0) && !e.TokensMatch() {
				a.m.tokenMismatch.Inc()
			}
			err = a.stored(e)
		case e.Type == wire.BlockRemoved:
			err = a.removed(e)
		case e.Type == wire.AllBlocksCleared:
			err = a.idx.ClearPod(a.id)
			a.cacheCleared(err)
			if a.rekey != nil {
				a.rekey.reset()
			}
			a.m.clearEvent.Inc()
		}
		if err != nil {
			a.pending = a.pending[:0]
			return fmt.Errorf("kvevents: apply %v: %w", e.Type, err)
		}
		a.m.events[e.Type].Inc()
	}
	if err := a.flush(); err != nil {
		return fmt.Errorf("kvevents: apply %v: %w", wire.BlockStored, err)
	}
	return a.syncLayout()
}

// store queues the keys of a stored event in tier for one Index.Stored
// call with the events stored after it (an SGLang pod sends one event per
// page): flush applies them, before any other event and at the batch's
// end.
func (a *applier) store(tier kvindex.Tier, keys []uint64) error {
	if len(a.pending) > 0 && tier != a.pendingTier {
		if err := a.flush(); err != nil {
			return err
		}
	}
	a.pending, a.pendingTier = append(a.pending, keys...), tier
	return nil
}

func (a *applier) flush() error {
	if len(a.pending) == 0 {
		return nil
	}
	keys := a.pending
	a.pending = a.pending[:0]
	return a.idx.Stored(a.id, a.pendingTier, keys)
}

func (a *applier) rekeyed() bool { return a.rekey != nil && a.rekey.active }

// keyed applies a stored or removed event of a group held under
// kvindex.GroupKey: its blocks are not verified (their token ids need not
// be the blocks'), and their hashes are the pod's own.
func (a *applier) keyed(e *wire.Event) error {
	keys := make([]uint64, len(e.Hashes))
	for i, h := range e.Hashes {
		keys[i] = kvindex.GroupKey(h, e.GroupIdx)
	}
	if e.Type == wire.BlockStored {
		return a.idx.Stored(a.id, e.Tier(), keys)
	}
	return a.idx.Removed(a.id, e.Tier(), keys)
}

// syncLayout gives the index the pod's layout when its groups, or its
// rekeying, changed: none while the pod is rekeyed.
func (a *applier) syncLayout() error {
	gi, ok := a.idx.(GroupIndex)
	rekeyed := a.rekeyed()
	if !ok || (a.groups.version == a.layoutVersion && rekeyed == a.layoutRekeyed) {
		return nil
	}
	var layout []kvindex.Group
	if !rekeyed {
		layout = a.groups.layout()
	}
	a.layoutVersion, a.layoutRekeyed = a.groups.version, rekeyed
	if err := gi.SetGroups(a.id, max(a.groups.blockSize, 1), layout); err != nil {
		return fmt.Errorf("kvevents: KV-cache groups: %w", err)
	}
	return nil
}

// stored applies a BlockStored event after verifying it: under the pod's
// own hashes, or kvrouter's when the pod is rekeyed.
func (a *applier) stored(e *wire.Event) error {
	if !a.foreign {
		a.verify.observe(e)
		if a.rekey != nil && a.verify.state == VerifyMismatch != a.rekey.active {
			if err := a.flush(); err != nil { // the pod's keys are about to change
				return err
			}
		}
		if err := a.followVerification(); err != nil {
			return err
		}
	}
	if keys, ok := a.keys(e, true); ok {
		return a.store(e.Tier(), keys)
	}
	return nil
}

// removed applies a BlockRemoved event, through the rekeyer's map unless
// the pod is verified.
func (a *applier) removed(e *wire.Event) error {
	if keys, ok := a.keys(e, false); ok {
		return a.idx.Removed(a.id, e.Tier(), keys)
	}
	return nil
}

// keys returns the hashes a stored (or removed) event's blocks go under in
// the index: the pod's own while it is verified or not rekeyed, else those
// the rekeyer maps them to (which it records or forgets); ok is false when
// none remain to apply.
func (a *applier) keys(e *wire.Event, stored bool) (keys []uint64, ok bool) {
	if a.foreign && a.rekey == nil {
		return nil, false // never the engine's own ids: see newSubscriber
	}
	if a.rekey == nil || (!a.foreign && a.verify.state == Verified) {
		return e.Hashes, true
	}
	if stored {
		keys = a.rekey.stored(e)
	} else {
		keys = a.rekey.removed(e)
	}
	if !a.rekey.active {
		return e.Hashes, true
	}
	return keys, len(keys) > 0
}

// followVerification starts rekeying the pod when its hashes mismatch, and
// stops when they are verified: a pod's entries switch from its own hashes
// to kvrouter's (the blocks the map holds so far) or back (none: its own
// hashes of the blocks it holds are unknown until it stores them again).
// A verified pod keeps no map.
func (a *applier) followVerification() error {
	rk := a.rekey
	if rk == nil {
		return nil
	}
	mismatch := a.verify.state == VerifyMismatch
	switch {
	case mismatch && !rk.active:
		if err := a.idx.ClearPod(a.id); err != nil {
			return fmt.Errorf("kvevents: rekey pod: %w", err)
		}
		for t, keys := range rk.byTier() {
			if len(keys) == 0 {
				continue
			}
			if err := a.idx.Stored(a.id, kvindex.Tier(t), keys); err != nil {
				return fmt.Errorf("kvevents: rekey pod: %w", err)
			}
		}
		rk.setActive(true)
	case !mismatch && rk.active:
		rk.setActive(false)
		rk.reset()
		if err := a.idx.ClearPod(a.id); err != nil {
			return fmt.Errorf("kvevents: stop rekeying pod: %w", err)
		}
	case a.verify.state == Verified:
		rk.reset()
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
		a.groups.reset()
		if a.rekey != nil && !a.foreign {
			a.rekey.setActive(false)
		}
	case clearExhausted:
		a.m.clearExhausted.Inc()
	}
	a.pending = a.pending[:0]
	if a.rekey != nil {
		a.rekey.reset()
	}
	log.Warn("kvevents: clearing the pod's index entries", "pod", pod, "reason", reason.String())
	if err := a.idx.ClearPod(a.id); err != nil {
		return fmt.Errorf("kvevents: clear pod %s: %w", pod, err)
	}
	if reason == clearRestart {
		a.cacheCleared(nil)
	}
	return a.syncLayout()
}

// cacheCleared tells a CacheClearer index that the pod's cache was
// cleared, once ClearPod succeeded (err nil).
func (a *applier) cacheCleared(err error) {
	if c, ok := a.idx.(CacheClearer); ok && err == nil {
		c.CacheCleared(a.id)
	}
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
