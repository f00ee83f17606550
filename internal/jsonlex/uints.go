package jsonlex

// Uint32s reads an array of integers in [0, 2^32) and appends them to dst,
// in one tight pass over the bytes: what a long array of token ids costs.
// Any other element (a sign, a fraction, an exponent, a larger value, not
// a number) is an error.
func (l *Lexer) Uint32s(dst []uint32) ([]uint32, error) {
	l.space()
	data, i := l.data, l.pos
	if i >= len(data) || data[i] != '[' {
		return dst, l.fail("looking for an array of integers")
	}
	i++
	first := true
	for {
		for i < len(data) && isSpace[data[i]] {
			i++
		}
		if i < len(data) && data[i] == ']' && first {
			l.pos = i + 1
			return dst, nil
		}
		start := i
		var v uint64
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			v = v*10 + uint64(data[i]-'0')
			if v > 1<<32-1 {
				return dst, l.failAt(start, "integer beyond 2^32-1")
			}
			i++
		}
		switch {
		case i == start:
			return dst, l.failAt(start, "looking for a non-negative integer")
		case i-start > 1 && data[start] == '0':
			return dst, l.failAt(start, "invalid number: leading zero")
		case i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E'):
			return dst, l.failAt(start, "looking for an integer")
		}
		dst = append(dst, uint32(v))
		first = false
		for i < len(data) && isSpace[data[i]] {
			i++
		}
		if i >= len(data) {
			return dst, l.failAt(i, "unexpected end of an array")
		}
		switch data[i] {
		case ',':
			i++
		case ']':
			l.pos = i + 1
			return dst, nil
		default:
			return dst, l.failAt(i, "looking for ',' or ']'")
		}
	}
}
