package fleetsim

// Prefill/decode disaggregation, as llm-d runs it with vLLM's NIXL
// connector: the router names a decode pod as the request's destination
// and, when that pod lacks enough of the prompt, a prefill pod too. The
// prefill pod computes the whole prompt like any request (its own prefix
// cache counted, chunked prefill, its blocks cached and published) and
// answers one token. The decode pod then admits the request, allocating
// blocks for the part of the prompt it does not hold, pulls their KV from
// the prefill pod over the link (Config.transferSeconds), caches those
// blocks (published as KV events, the NIXL connector's decode side holds
// them as its own), computes the prompt's last token for the first output
// token, and decodes. Time to first token runs to that first token.
//
// Simplifications: the prefill pod frees its blocks (they stay cached)
// when it answers, not when the decode pod's read completes; a transfer
// occupies no step of either pod, and transfers do not share a link.

// disaggregator is a Policy that names prefill pods.
type disaggregator interface {
	// PrefillPod returns the prefill pod that computes the prompt of r,
	// which Pick just routed, or -1 when Pick's pod computes it.
	PrefillPod(r *Request) int
}

// prefillPod is the prefill pod the policy names for r, or -1.
func (s *Sim) prefillPod(r *Request) int {
	if d, ok := s.policy.(disaggregator); ok && s.cfg.prefills() {
		return d.PrefillPod(r)
	}
	return -1
}

// handOff is the prefill pod's answer for the prefill seq pq: its request
// goes to its decode pod, which admits it to pull the prompt's KV.
func (s *Sim) handOff(pq *seq) {
	q := &s.seqs[pq.req.ID]
	if q.aborted {
		return
	}
	q.remote = true
	s.enqueue(q)
}

// transferred is the KV of request id reaching its decode pod i: the
// request joins the pod's running batch.
func (s *Sim) transferred(i, id int) {
	p := s.pods[i]
	if !p.received(&s.seqs[id]) {
		return
	}
	s.publish(i)
	if !p.busy {
		s.startStep(i)
	}
}
