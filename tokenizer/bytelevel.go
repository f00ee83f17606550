package tokenizer

// runeByte inverts the GPT-2 byte-level alphabet: the printable character
// each byte is spelled with in byte-level vocabularies.
var runeByte = byteLevelAlphabet()

func byteLevelAlphabet() map[rune]byte {
	var fwd [256]rune
	inv := make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			fwd[b] = rune(b)
		} else {
			fwd[b] = next
			next++
		}
		inv[fwd[b]] = byte(b)
	}
	return inv
}

// fromByteLevel returns the raw bytes a byte-level token spells, or false
// when it holds a character outside the alphabet.
func fromByteLevel(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeByte[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}
