package kvevents

import (
	"testing"

	"github.com/kvrouter/kvrouter/kvevents/wire"

	"github.com/kvrouter/kvrouter/kvindex"
)

// FuzzRekey plays random stores (from the root or continuing a block seen
// before, on GPU or CPU), removals, clears and restarts against a rekeyed
// pod whose map holds 8 blocks, the pod's hashes being a real chain of
// another root. After each step: no panic, the map within its bound, and
// every block the map holds in a tier is in the index for the pod.
func FuzzRekey(f *testing.F) {
	f.Add([]byte{0, 3, 1, 1, 0, 2, 2, 0, 3, 0, 1})
	f.Add([]byte{0, 7, 0, 9, 1, 0, 1, 5, 2, 1, 2, 3, 4})
	f.Add([]byte{8, 2, 1, 0, 9, 0, 2, 1, 5, 3, 6, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		fx, _ := mismatchFixture(t)
		rk := fx.a.rekey
		rk.ring = rk.ring[:8]
		rk.reset()
		type seen struct {
			hash   uint64
			tokens []uint32
		}
		var blocks []seen // every block the pod published, in order
		next := opReader(&ops)
		for len(ops) > 0 {
			op, arg := next(), next()
			var e wire.Event
			switch op % 6 {
			case 0, 1: // store 1-4 blocks, from the root or after a seen block
				n := int(arg%4) + 1
				tokens := u32s(int(arg)*1000, 16*n)
				hashes, _ := podChain(t, nil, tokens)
				e = stored(hashes, nil, tokens, 16)
				if op%6 == 1 && len(blocks) > 0 {
					p := blocks[int(arg)%len(blocks)]
					tokens = append(append([]uint32(nil), p.tokens...), tokens...)
					all, _ := podChain(t, nil, tokens)
					e = stored(all[len(p.tokens)/16:], &p.hash, tokens[len(p.tokens):], 16)
				}
				if op >= 128 {
					e.Medium = "CPU"
				}
				for i, h := range e.Hashes {
					parent := len(tokens) - len(e.Tokens)
					blocks = append(blocks, seen{h, tokens[:parent+16*(i+1)]})
				}
			case 2, 3: // remove up to 3 seen blocks
				if len(blocks) == 0 {
					continue
				}
				e = wire.Event{Type: wire.BlockRemoved}
				for i := range int(arg%3) + 1 {
					e.Hashes = append(e.Hashes, blocks[(int(arg)+i*7)%len(blocks)].hash)
				}
				if op >= 128 {
					e.Medium = "CPU"
				}
			case 4:
				e = wire.Event{Type: wire.AllBlocksCleared}
			default:
				if err := fx.a.clear(clearExhausted, fx.a.verify.log, "pod-a"); err != nil {
					t.Fatal(err)
				}
				continue
			}
			fx.applyEvents(t, e)
			if n := len(rk.blocks); n > len(rk.ring) {
				t.Fatalf("map holds %d blocks, bound %d", n, len(rk.ring))
			}
			for hash, b := range rk.blocks {
				if b.tiers == 0 {
					t.Fatalf("pod hash %d in the map with no tier", hash)
				}
				m := fx.idx.Match("model", []uint64{b.d.Value()}, []kvindex.PodID{fx.id}, nil)
				if m[0].Blocks != 1 {
					t.Fatalf("pod hash %d: the map holds it (tiers %b), the index does not", hash, b.tiers)
				}
			}
		}
	})
}
