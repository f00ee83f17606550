package router

import (
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// scribbler tokenizes as byteTokens and remembers the buffer it filled, so
// that the test can overwrite it once the router has returned.
type scribbler struct{ last []uint32 }

func (s *scribbler) AppendTokens(dst []uint32, base string, p *Parsed) ([]uint32, error) {
	ids, err := byteTokens{}.AppendTokens(dst, base, p)
	s.last = ids
	return ids, err
}

func (s *scribbler) scribble() {
	all := s.last[:cap(s.last)]
	for i := range all {
		all[i] = 0xffffffff
	}
}

// TestRouterKeepsNoTokenBuffer overwrites the token ids after every
// decision: the decisions, the speculative entries they recorded and the
// score report must all stand.
func TestRouterKeepsNoTokenBuffer(t *testing.T) {
	tr := newTestRouter(t)
	s := &scribbler{}
	tr.tok = s
	body := completion("llama", prompt, "")
	var kept []*Decision
	for i := range 3 {
		d, err := tr.route("/v1/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		s.scribble()
		kept = append(kept, d)
		if i > 0 && (d.Pod != kept[0].Pod || d.Matched != 7) {
			t.Errorf("Route #%d = %s with %d/7 blocks, want %s with all: the first decision's speculative entries", i, d.Pod, d.Matched, kept[0].Pod)
		}
		d.Done() // its entries count for the index's grace period more
	}
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	s.scribble()
	ids, _ := byteTokens{}.AppendTokens(nil, "llama", &Parsed{Prompt: prompt})
	want := tr.hasher.AppendHashes(nil, ids, blockhash.Extra{})
	if len(rep.Blocks) != len(want) {
		t.Fatalf("Score reports %d blocks, want %d", len(rep.Blocks), len(want))
	}
	for i, h := range want {
		if rep.Blocks[i] != strconv.FormatUint(h, 10) {
			t.Errorf("Score block %d = %s, want %d", i, rep.Blocks[i], h)
		}
	}
	for i, d := range kept {
		if d.Tokens != 30 || d.Total != 7 || d.Model != "llama" {
			t.Errorf("decision %d now reads %d tokens, %d blocks, model %q, want 30, 7, llama", i, d.Tokens, d.Total, d.Model)
		}
	}
}
