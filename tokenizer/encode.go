package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// Encode returns the token ids of text. addSpecialTokens adds what the
// post-processor (or tokenizer_config.json) puts around a sequence, as
// vLLM does for completion prompts; chat prompts rendered from a template
// are encoded without. Invalid UTF-8 is read as one U+FFFD per bad byte.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.AppendEncode(make([]uint32, 0, len(text)/3+4), text, addSpecialTokens)
}

// AppendEncode is Encode appending to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, text string, addSpecialTokens bool) ([]uint32, error) {
	return t.AppendEncodeProgress(dst, text, addSpecialTokens, nil)
}

// appendEncode encodes valid UTF-8 text. With a recorder it resumes at
// rec.from (dst then already holds the ids of text before it, the
// post-processor's prefix included, from rec.base on) and records a mark
// after every added token matched in the raw text.
func (t *Tokenizer) appendEncode(dst []uint32, text string, addSpecialTokens bool, rec *recorder) ([]uint32, error) {
	return t.appendEncodeProgress(dst, text, addSpecialTokens, rec, nil)
}

// Progress is told of the ids of an encoding as they become final: ids is
// the destination slice extended by them (what it held before included),
// a prefix of the result, longer at each call. It runs on the goroutine
// that called the encoding, while other cores encode the rest of a long
// text in parts (it is never called otherwise), so that the caller can
// hash the first blocks meanwhile. It must not keep or change ids.
type Progress func(ids []uint32)

// AppendEncodeProgress is AppendEncode telling progress of the ids final
// so far (see Progress).
func (t *Tokenizer) AppendEncodeProgress(dst []uint32, text string, addSpecialTokens bool, progress Progress) ([]uint32, error) {
	if !utf8.ValidString(text) {
		text = validUTF8(text)
	}
	return t.appendEncodeProgress(dst, text, addSpecialTokens, nil, progress)
}

// appendEncodeProgress is appendEncode telling progress (nil: none).
func (t *Tokenizer) appendEncodeProgress(dst []uint32, text string, addSpecialTokens bool, rec *recorder, progress Progress) ([]uint32, error) {
	n := len(text)
	if rec != nil {
		n -= rec.from.i
	}
	parts, counted := t.parts(n)
	if counted {
		defer longEncodes.Add(-1)
	}
	return t.appendEncodeIn(dst, text, addSpecialTokens, rec, parts, progress)
}

// appendEncodeIn is appendEncode in parts (see splitParallel).
func (t *Tokenizer) appendEncodeIn(dst []uint32, text string, addSpecialTokens bool, rec *recorder, parts int, progress Progress) ([]uint32, error) {
	if addSpecialTokens && t.post != nil && (rec == nil || rec.from == (scanState{})) {
		dst = append(dst, t.post.prefix...)
	}
	e := encoder{t: t, ids: dst, rec: rec, progress: progress}
	e.hot = t.hot.take()
	defer t.hot.put(e.hot)
	var from scanState
	var mark func(scanState)
	if rec != nil {
		from, mark = rec.from, e.mark
	}
	var err error
	if parts > 1 {
		err = e.splitParallel(text, from, parts)
	} else {
		err = t.raw.splitFrom(text, from, e.segment, e.token, mark)
	}
	if err != nil {
		return dst, fmt.Errorf("tokenizer: encode: %w", err)
	}
	if addSpecialTokens && t.post != nil {
		e.ids = append(e.ids, t.post.suffix...)
	}
	return e.ids, nil
}

// recorder is where an encoding resumes and the marks it records.
type recorder struct {
	from  scanState
	base  int    // index in the ids of the text's first id
	marks []mark // appended to
}

// mark is a point of a text after an added token where an encoding can
// resume: the scan state there, the number of ids before it (the
// post-processor's prefix included) and the horizon, the length of the
// text's prefix the state and those ids depend on (the split's reach, see
// addedSet.splitFrom; at most len(text)+1).
type mark struct {
	i, done, n, horizon uint32
}

func (m mark) state() scanState {
	return scanState{i: int(m.i), done: int(m.done), reach: int(m.horizon)}
}

// encoder is the state of one Encode call.
type encoder struct {
	t   *Tokenizer
	ids []uint32
	err error
	rec *recorder
	// progress, when set, is told of the ids final so far (splitParallel).
	progress Progress
	first    bool // the current segment starts the input
	runs     [maxSteps]splitRun
	next     [maxSteps]stepSink
	words    wordSink
	hot      *hotWords // nil: none (none free, or a chunk encoder between uses)
}

// wordSink encodes the matches of an isolating split and the gaps between
// them as words, in order.
type wordSink struct {
	e    *encoder
	s    string
	prev int // end of the last match
}

func (w *wordSink) match(a, b int) {
	if a > w.prev {
		w.e.wordAt(w.s, w.prev, a)
	}
	if b > a {
		w.e.wordAt(w.s, a, b)
	}
	w.prev = b
}

func (e *encoder) mark(st scanState) {
	r := e.rec
	r.marks = append(r.marks, mark{i: uint32(st.i), done: uint32(st.done), n: uint32(len(e.ids) - r.base), horizon: uint32(st.reach)})
}

// maxSteps bounds the pre-tokenization steps of a tokenizer.
const maxSteps = 8

// stepSink sends the pieces of step k-1 to step k.
type stepSink struct {
	e     *encoder
	k     int
	first bool // the split string starts the input
}

func (s *stepSink) piece(p string, start int) { s.e.split(p, s.k, s.first && start == 0) }

func (e *encoder) token(id uint32) { e.ids = append(e.ids, id) }

// segment encodes raw text between added tokens: normalize, match the
// normalized added tokens, pre-tokenize and encode every word.
func (e *encoder) segment(s string, start int) error {
	if e.t.normalizer != nil {
		s = e.t.normalizer.normalize(s)
	}
	e.first = start == 0
	return e.t.normAdded.split(s, e.pretokenized, e.token)
}

func (e *encoder) pretokenized(s string, start int) error {
	e.split(s, 0, e.first && start == 0)
	return e.err
}

// split runs pre-tokenization step k on s and encodes the words it yields.
// first tells whether s starts the input (offset 0 in the raw text).
func (e *encoder) split(s string, k int, first bool) {
	steps := e.t.steps
	for ; k < len(steps) && steps[k].m == nil; k++ {
		s = steps[k].transform(s, first)
	}
	if k == len(steps) {
		e.word(s)
		return
	}
	if steps[k].meta != nil {
		s = steps[k].transform(s, first)
	}
	if k == len(steps)-1 && steps[k].behavior == isolated {
		// The last split, isolating: its matches and the gaps between
		// them are the words.
		e.words = wordSink{e: e, s: s}
		steps[k].m.matches(s, &e.words)
		if e.words.prev < len(s) {
			e.word(s[e.words.prev:])
		}
		return
	}
	e.next[k] = stepSink{e: e, k: k + 1, first: first}
	e.runs[k].run(&steps[k], s, &e.next[k])
}

func (e *encoder) word(w string) { e.wordAt(w, 0, len(w)) }

// wordAt encodes the word s[i:j], through e.hot when it is short.
func (e *encoder) wordAt(s string, i, j int) {
	if e.err != nil {
		return
	}
	w, h := s[i:j], e.hot
	if h == nil || len(w) > hotLongest {
		e.ids, e.err = e.t.encodeWord(e.ids, w)
		return
	}
	a, b, k := hotKey(s, i, j)
	set := (*[2]hotWord)(h[k : k+2])
	x := &set[0]
	if !x.holds(a, b, len(w)) {
		x = &set[1]
	}
	if x.holds(a, b, len(w)) {
		if x.k == 1 { // most words: one store, not a copy
			e.ids = append(e.ids, x.ids[0])
		} else {
			e.ids = append(e.ids, x.ids[:x.k]...)
		}
		return
	}
	n := len(e.ids)
	e.ids, e.err = e.t.encodeWord(e.ids, w)
	if got := e.ids[n:]; e.err == nil && len(got) <= hotIDs {
		x := hotWord{a: a, b: b, n: uint8(len(w) + 1), k: uint8(len(got))}
		copy(x.ids[:], got)
		set[1], set[0] = set[0], x
	}
}

// encodeWord appends the ids of one pre-tokenized word.
func (t *Tokenizer) encodeWord(dst []uint32, w string) ([]uint32, error) {
	m := t.model
	slot, id, inVocab := 0, uint32(0), false
	if len(w) <= m.longest {
		slot, id, inVocab = m.vocab.slot(w)
	}
	if inVocab && (m.ignoreMerges || m.whole.get(slot) == wordWhole) {
		return append(dst, id), nil
	}
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if out, ok := t.cache.appendCached(dst, w); ok {
			return out, nil
		}
	}
	start := len(dst)
	dst, err := m.symbols(w, dst)
	if err != nil {
		return dst[:start], err
	}
	merged := m.merge(dst[start:])
	dst = dst[:start+len(merged)]
	if inVocab {
		m.whole.set(slot, len(merged) == 1 && merged[0] == id)
	}
	if cacheable {
		t.cache.put(w, dst[start:])
	}
	return dst, nil
}

// validUTF8 replaces every byte that is not part of valid UTF-8 by U+FFFD.
func validUTF8(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	return string(out)
}

// AppendEncodeStable is AppendEncode, also returning how many of the ids
// it appended (the post-processor's prefix included, its suffix not) are
// fixed by text[:limit] alone: those before the last added token matched
// in the raw text whose every decision read only bytes below limit (see
// PrefixCache). Any text that agrees with text below limit encodes to the
// same first stable ids, whatever follows. A router that knows a prompt
// only up to limit (a multimodal prompt, whose media the pods expand into
// tokens the router cannot reproduce) hashes those ids and no others.
// Invalid UTF-8 text gives stable 0.
func (t *Tokenizer) AppendEncodeStable(dst []uint32, text string, addSpecialTokens bool, limit int) (out []uint32, stable int, err error) {
	if !utf8.ValidString(text) {
		out, err = t.AppendEncode(dst, text, addSpecialTokens)
		return out, 0, err
	}
	rec := &recorder{base: len(dst)}
	if out, err = t.appendEncode(dst, text, addSpecialTokens, rec); err != nil {
		return out, 0, err
	}
	for _, m := range rec.marks {
		if int(m.horizon) > limit {
			break // horizons grow with their position
		}
		stable = int(m.n)
	}
	return out, stable, nil
}
