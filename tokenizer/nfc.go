package tokenizer

import (
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// cgj is U+034F COMBINING GRAPHEME JOINER, which golang.org/x/text/unicode/norm
// inserts after 30 non-starters (the Stream-Safe Text Format); the Rust
// normalizer does not, so text where that happens takes nfcSlow.
const cgj = "\u034f"

// The Rust normalizer's tables lack one canonical decomposition that Go's
// have (U+11938 DIVES AKURU VOWEL SIGN O = U+11935 U+11930): it neither
// decomposes the one nor composes the other. Text holding either takes
// nfcSlow, which does the same.
const (
	divesAkuruO = '\U00011938'
	divesAkuruE = '\U00011935'
)

// nfc returns the canonical composition (NFC) of s as the Rust normalizer
// makes it: without stream-safe joiners, and with its tables.
func nfc(s string) string {
	if isASCII(s) {
		return s
	}
	if strings.ContainsRune(s, divesAkuruE) || strings.ContainsRune(s, divesAkuruO) {
		return nfcSlow(s)
	}
	out := norm.NFC.String(s)
	if strings.Contains(out, cgj) && strings.Count(out, cgj) != strings.Count(s, cgj) {
		return nfcSlow(s)
	}
	return out
}

// isASCII reports whether s holds only ASCII bytes, eight at a time: a
// long prompt's whole text passes here before it is encoded.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if le64(s[i:])&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// nfcSlow is NFC by the book: full canonical decomposition of every
// character, a stable sort of every run of non-starters by combining class
// however long, then canonical composition.
func nfcSlow(s string) string {
	runes := make([]rune, 0, len(s))
	for _, r := range s {
		if r == divesAkuruO {
			runes = append(runes, r)
			continue
		}
		runes = append(runes, []rune(norm.NFD.String(string(r)))...)
	}
	ccc := make([]uint8, len(runes))
	for i, r := range runes {
		ccc[i] = combiningClass(r)
	}
	for i := 0; i < len(runes); {
		if ccc[i] == 0 {
			i++
			continue
		}
		j := i
		for j < len(runes) && ccc[j] != 0 {
			j++
		}
		sort.Stable(byClass{runes[i:j], ccc[i:j]})
		i = j
	}
	return string(compose(runes, ccc))
}

func combiningClass(r rune) uint8 {
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	return norm.NFD.Properties(buf[:n]).CCC()
}

type byClass struct {
	r []rune
	c []uint8
}

func (b byClass) Len() int           { return len(b.r) }
func (b byClass) Less(i, j int) bool { return b.c[i] < b.c[j] }
func (b byClass) Swap(i, j int) {
	b.r[i], b.r[j] = b.r[j], b.r[i]
	b.c[i], b.c[j] = b.c[j], b.c[i]
}

// compose is the canonical composition algorithm over decomposed, ordered
// runes with their combining classes.
func compose(runes []rune, ccc []uint8) []rune {
	out := runes[:0]
	starter := -1
	var last uint8 // class of the last rune kept after the starter
	for i, r := range runes {
		c := ccc[i]
		if starter >= 0 {
			adjacent := len(out)-1 == starter
			if adjacent || (last != 0 && last < c) {
				if p, ok := composePair(out[starter], r); ok {
					out[starter] = p
					continue
				}
			}
		}
		if c == 0 {
			starter = len(out)
		}
		last = c
		out = append(out, r)
	}
	return out
}

// composePair returns the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	if a == divesAkuruE && b == 0x11930 {
		return 0, false
	}
	var buf [2 * utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], a)
	n += utf8.EncodeRune(buf[n:], b)
	out := norm.NFC.Bytes(buf[:n])
	r, size := utf8.DecodeRune(out)
	if size != len(out) {
		return 0, false
	}
	return r, true
}
