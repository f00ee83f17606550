package kvevents

import (
	"log/slog"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// Verification is a pod's hash verification state: whether the hashes in its
// events equal what kvrouter computes from the same token ids.
type Verification uint8

// The verification states.
const (
	// VerifyUnknown: no chain could be checked yet, or too few failed to
	// conclude (a cache_salt invisible in older events fails a chain too).
	VerifyUnknown Verification = iota
	// Verified: at least one chain in the window matched.
	Verified
	// VerifyMismatch: chains keep failing and none matched over the window:
	// the pod's --prefix-caching-hash-algo or PYTHONHASHSEED (or block size)
	// differ from kvrouter's hash configuration. The pod is then rekeyed
	// (see rekey.go) unless Config.RekeyBlocks is 0.
	VerifyMismatch
)

var verificationNames = [...]string{"unknown", "verified", "mismatch"}

func (v Verification) String() string {
	if int(v) < len(verificationNames) {
		return verificationNames[v]
	}
	return "invalid"
}

// maxKnownDigests bounds a verifier's memory of recently verified digests.
const maxKnownDigests = 4096

// verifier recomputes the hash chains of one pod's BlockStored events. It is
// owned by the pod's applier goroutine.
type verifier struct {
	h          *blockhash.Hasher // nil: verification disabled
	window     []int8            // ring of recent results: 1 ok, -1 mismatch
	next       int
	ok, failed int
	minFailed  int
	sample     int
	seen       int
	state      Verification
	// known maps the value of a verified block to its full digest, so a
	// later event whose parent is that block can be checked too.
	known    map[uint64]blockhash.Digest
	pod      string
	log      *slog.Logger
	m        *podMetrics
	onChange func(Verification) // nil: nobody listens
}

func newVerifier(cfg *Config, h *blockhash.Hasher, pod string, log *slog.Logger, m *podMetrics) *verifier {
	return &verifier{
		h: h, window: make([]int8, max(cfg.VerifyWindow, 1)), minFailed: cfg.VerifyMinFailures,
		sample: max(cfg.VerifySample, 1), known: make(map[uint64]blockhash.Digest),
		pod: pod, log: log, m: m,
	}
}

// observe checks e when it is checkable and due (every event until the pod
// is verified, then one in sample), and updates the state.
func (v *verifier) observe(e *wire.Event) {
	if v.h == nil || !e.TokensMatch() {
		return
	}
	if v.state == Verified {
		v.seen++
		if v.seen%v.sample != 0 {
			return
		}
	}
	switch v.check(e) {
	case 1:
		v.m.checkOK.Inc()
		v.record(1)
	case -1:
		v.m.checkMismatch.Inc()
		v.record(-1)
	}
}

// check returns 1 when every block of e hashes to its published value, -1
// when one does not, and 0 when e cannot be checked (unknown parent digest,
// extra keys kvrouter cannot reproduce).
func (v *verifier) check(e *wire.Event) int {
	parent, first := v.h.Root(), true
	switch {
	case !e.HasParent:
	case e.HasParentDigest:
		parent, first = e.ParentDigest, false
	default:
		d, ok := v.known[e.Parent]
		if !ok {
			return 0
		}
		parent, first = d, false
	}
	bs := e.BlockSize
	for i, want := range e.Hashes {
		extra, ok := blockExtra(e, i, first && i == 0)
		if !ok {
			return 0
		}
		parent = v.h.Block(parent, first && i == 0, e.Tokens[i*bs:(i+1)*bs], extra)
		if parent.Value() != want {
			return -1
		}
	}
	if len(v.known) >= maxKnownDigests {
		clear(v.known)
	}
	v.known[e.Hashes[len(e.Hashes)-1]] = parent
	return 1
}

// blockExtra returns the extra keys block i of e was hashed with, and false
// when they cannot be reproduced.
func blockExtra(e *wire.Event, i int, first bool) (blockhash.Extra, bool) {
	x := blockhash.Extra{LoRA: e.LoRAName}
	if e.ExtraKeys == nil {
		return x, true
	}
	if i >= len(e.ExtraKeys) || e.ExtraKeys[i].Opaque {
		return x, false
	}
	keys := e.ExtraKeys[i].Keys
	switch {
	case e.LoRAName != "":
		if len(keys) == 0 || keys[0] != e.LoRAName {
			return x, false
		}
		keys = keys[1:]
	case first && len(keys) == 2, !first && len(keys) == 1:
		x.LoRA, keys = keys[0], keys[1:]
	}
	if first && len(keys) == 1 {
		x.CacheSalt, keys = keys[0], nil
	}
	return x, len(keys) == 0
}

// record adds one result to the window and logs a change of state.
func (v *verifier) record(r int8) {
	switch v.window[v.next] {
	case 1:
		v.ok--
	case -1:
		v.failed--
	}
	v.window[v.next] = r
	v.next = (v.next + 1) % len(v.window)
	if r == 1 {
		v.ok++
	} else {
		v.failed++
	}
	state := v.state
	switch {
	case v.ok > 0:
		state = Verified
	case v.failed >= v.minFailed:
		state = VerifyMismatch
	}
	if !v.setState(state) {
		return
	}
	cfg := v.h.Config()
	if state == VerifyMismatch {
		v.log.Warn("kvevents: pod's block hashes differ from kvrouter's; check that the pod's --prefix-caching-hash-algo and PYTHONHASHSEED (and --block-size) match kvrouter's hash configuration",
			"pod", v.pod, "algorithm", string(cfg.Algorithm), "block_size", cfg.BlockSize, "failed_checks", v.failed)
		return
	}
	v.log.Info("kvevents: pod's block hashes verified", "pod", v.pod, "algorithm", string(cfg.Algorithm))
}

// setState moves to state and reports whether it changed.
func (v *verifier) setState(state Verification) bool {
	if state == v.state {
		return false
	}
	v.state = state
	v.m.verification.Set(float64(state))
	if v.onChange != nil {
		v.onChange(state)
	}
	return true
}

// reset forgets every check and the verified digests, for a pod whose
// publisher restarted: the new process may hash with another configuration
// (a new PYTHONHASHSEED), so it is judged afresh, from "unknown".
func (v *verifier) reset() {
	clear(v.window)
	clear(v.known)
	v.next, v.ok, v.failed, v.seen = 0, 0, 0, 0
	v.setState(VerifyUnknown)
}
