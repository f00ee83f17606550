package tokenizer

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// A long text is encoded on several cores when they are free. Text between
// two added tokens matched in the raw text is encoded on its own (the
// normalizer, the pre-tokenizer and the merges never see across an added
// token; only whether the stretch starts the input matters), so the split
// of the raw text is cut into chunks between stretches, which a number of
// workers (the parts: the calling goroutine and parts-1 others) encode,
// and their ids are concatenated in order: the same ids as one pass. A
// chat prompt has added tokens around every message. Where the tokenizer
// allows it (cutsAtLines), a stretch longer than a chunk's share, a long
// message or a completion prompt, is cut further at line starts.
const (
	// minPart is the least raw text (bytes) per worker.
	minPart = 16 << 10
	// maxParts bounds the workers of one encoding.
	maxParts = 8
	// chunksPerPart is how many chunks per worker the text is cut into.
	chunksPerPart = 4
)

// longEncodes counts the encodings of texts long enough to be parted that
// are running in the process. An encoding takes GOMAXPROCS ÷ that many
// parts, so a busy process (as many long encodings as cores) encodes each
// in one pass and spends nothing on coordination.
var longEncodes atomic.Int32

// piece is one step of a raw split: a stretch of text (s not empty), an
// added token, or a mark (with a recorder).
type piece struct {
	s     string
	start int
	id    uint32
	kind  pieceKind
	st    scanState
}

type pieceKind uint8

const (
	pieceText pieceKind = iota
	pieceToken
	pieceMark
)

// piecesPool holds the pieces of splits, chunkPool the encoders of chunks
// (each its own allocation: side by side in one slice, two workers'
// encoders shared cache lines), with their ids and marks.
var (
	piecesPool = sync.Pool{New: func() any { return new([]piece) }}
	chunkPool  = sync.Pool{New: func() any { return new(chunkEncoder) }}
)

// chunkEncoder is the encoder of one chunk and its recorder.
type chunkEncoder struct {
	encoder
	own recorder
}

// parts returns how many parts an encoding of n bytes of raw text takes
// now, and whether it counted itself in longEncodes (then the caller
// decrements it when done).
func (t *Tokenizer) parts(n int) (parts int, counted bool) {
	if n < 2*minPart || t.raw.empty() {
		return 1, false
	}
	return partsFor(n, runtime.GOMAXPROCS(0), int(longEncodes.Add(1))), true
}

// partsFor is the number of parts of an encoding of n bytes of raw text
// with procs cores and running long encodings (this one included).
func partsFor(n, procs, running int) int {
	if n < 2*minPart {
		return 1
	}
	return max(1, min(procs/running, n/minPart, maxParts))
}

// splitParallel is the raw split of text from the state from, encoded by
// parts workers (parts ≥ 2) as described above, into e.
func (e *encoder) splitParallel(text string, from scanState, parts int) error {
	pp := piecesPool.Get().(*[]piece)
	defer func() {
		clear(*pp)
		*pp = (*pp)[:0]
		piecesPool.Put(pp)
	}()
	ps := *pp
	textBytes := 0
	var mark func(scanState)
	if e.rec != nil {
		mark = func(st scanState) { ps = append(ps, piece{kind: pieceMark, st: st}) }
	}
	err := e.t.raw.splitFrom(text, from,
		func(s string, start int) error {
			ps = append(ps, piece{s: s, start: start})
			textBytes += len(s)
			return nil
		},
		func(id uint32) { ps = append(ps, piece{id: id, kind: pieceToken}) },
		mark)
	*pp = ps
	if err != nil {
		return err
	}
	// Cut before a stretch once a chunk holds its share of the text. The
	// workers (this goroutine and parts-1 others) take chunks in turn, so
	// that a worker slowed by anything else takes fewer.
	chunks := parts * chunksPerPart
	if e.t.lineCuts {
		ps = cutLines(ps, textBytes/chunks)
	}
	cuts := make([]int, 1, chunks+1)
	for i, acc := 0, 0; i < len(ps) && len(cuts) < chunks; i++ {
		if ps[i].kind != pieceText {
			continue
		}
		if acc >= len(cuts)*textBytes/chunks {
			cuts = append(cuts, i)
		}
		acc += len(ps[i].s)
	}
	cuts = append(cuts, len(ps))
	if len(cuts) < 3 {
		return e.play(ps)
	}
	out := make([]*chunkEncoder, len(cuts)-1)
	errs := make([]error, len(out))
	finished := make(chan int, len(out))
	var next atomic.Int32
	claim := func() int { return int(next.Add(1)) - 1 }
	// Each worker encodes its chunks through one table of hot words (this
	// goroutine through its own), which stays in that core's cache.
	encode := func(c int, hot *hotWords) {
		o := chunkPool.Get().(*chunkEncoder)
		o.encoder = encoder{t: e.t, ids: o.ids[:0], hot: hot}
		if e.rec != nil {
			o.own = recorder{marks: o.own.marks[:0]}
			o.rec = &o.own
		}
		out[c] = o
		errs[c] = o.play(ps[cuts[c]:cuts[c+1]])
		finished <- c
	}
	var wg sync.WaitGroup
	defer wg.Wait() // before ps goes back to its pool, should progress panic
	for range min(parts, len(out)) - 1 {
		wg.Go(func() {
			hot := e.t.hot.take()
			defer e.t.hot.put(hot)
			for c := claim(); c < len(out); c = claim() {
				encode(c, hot)
			}
		})
	}
	// This goroutine publishes the chunks in order as they are done (and
	// tells progress), and encodes chunks while none is ready to publish.
	done, told := make([]bool, len(out)), len(e.ids)
	for pub := 0; pub < len(out); {
		for drained := false; !drained; {
			select {
			case c := <-finished:
				done[c] = true
			default:
				drained = true
			}
		}
		if done[pub] {
			for ; pub < len(out) && done[pub]; pub++ {
				err = e.publish(out[pub], err, errs[pub])
			}
			if err == nil && e.progress != nil && len(e.ids) > told {
				told = len(e.ids)
				e.progress(e.ids)
			}
			continue
		}
		if c := claim(); c < len(out) {
			encode(c, e.hot)
			continue
		}
		done[<-finished] = true
	}
	return err
}

// publish appends the ids and marks of a chunk's encoder o to e's, unless
// an earlier chunk failed (err) or this one did (oerr), and recycles o.
// It returns the first error.
func (e *encoder) publish(o *chunkEncoder, err, oerr error) error {
	if err == nil {
		err = oerr
	}
	if err == nil {
		if e.rec != nil {
			n := uint32(len(e.ids) - e.rec.base)
			for _, m := range o.rec.marks {
				m.n += n
				e.rec.marks = append(e.rec.marks, m)
			}
		}
		e.ids = append(e.ids, o.ids...)
	}
	// Keep the buffers, not the text the pre-tokenization state points into.
	o.encoder = encoder{ids: o.ids[:0]}
	o.own = recorder{marks: o.own.marks[:0]}
	chunkPool.Put(o)
	return err
}

// play encodes the pieces of a split in order.
func (e *encoder) play(ps []piece) error {
	for i := range ps {
		switch p := &ps[i]; p.kind {
		case pieceText:
			if err := e.segment(p.s, p.start); err != nil {
				return err
			}
		case pieceToken:
			e.token(p.id)
		case pieceMark:
			e.mark(p.st)
		}
	}
	return nil
}

// cutsAtLines reports whether t encodes a stretch of text as it encodes
// the pieces it is cut into at line starts (after a '\n', before an ASCII
// letter), one after the other. It does when nothing in its pipeline sees
// across such a cut: no normalizer, or NFC (a letter is a starter that
// composes with nothing before it); no added token matched in normalized
// text holds a '\n'; no Metaspace and no ByteLevel prefix space (they treat
// a piece's start); and pre-tokenization by isolating splits whose matches
// never hold a '\n' and the letter after it, the last of which ends a
// match at every line start and decides nothing there by looking ahead
// (its newline run, `\s*[\r\n]+`, comes before `\s+(?!\S)`): the Llama-3,
// Qwen, o200k and DeepSeek patterns, DeepSeek's digit and kana splits
// before its last. Any other pipeline encodes each stretch in one piece.
func (t *Tokenizer) cutsAtLines() bool {
	switch t.normalizer.(type) {
	case nil, nfcNormalizer:
	default:
		return false
	}
	for k := range t.normAdded.children {
		if byte(k) == '\n' {
			return false
		}
	}
	if len(t.steps) == 0 {
		return false // the whole stretch is one word
	}
	for i, st := range t.steps {
		if st.meta != nil || st.prefixSpace || st.m == nil || st.behavior != isolated {
			return false
		}
		switch st.m.(type) {
		case scanner, o200k, deepseekWords:
		case digits, kana:
			if i == len(t.steps)-1 {
				return false // its gaps may run across a line start
			}
		default:
			return false
		}
	}
	return true
}

// cutLines cuts the text pieces of ps at least twice share bytes long at
// line starts about share bytes apart (see cutsAtLines). It returns ps
// when it cuts none, a new slice when it does.
func cutLines(ps []piece, share int) []piece {
	if share < 1 {
		return ps
	}
	var out []piece
	for i, p := range ps {
		for p.kind == pieceText && len(p.s) >= 2*share {
			k := lineStart(p.s, share)
			if k < 0 {
				break
			}
			if out == nil {
				out = append(make([]piece, 0, len(ps)+16), ps[:i]...)
			}
			out = append(out, piece{s: p.s[:k], start: p.start})
			p.s, p.start = p.s[k:], p.start+k
		}
		if out != nil {
			out = append(out, p)
		}
	}
	if out == nil {
		return ps
	}
	return out
}

// lineStart is the first index of s from from on (from ≥ 1) that follows a
// '\n' and holds an ASCII letter; -1 when there is none.
func lineStart(s string, from int) int {
	for i := from - 1; i < len(s)-1; {
		j := strings.IndexByte(s[i:len(s)-1], '\n')
		if j < 0 {
			return -1
		}
		k := i + j + 1
		if isASCIILetter(s[k]) {
			return k
		}
		i = k
	}
	return -1
}
