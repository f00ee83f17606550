package tokenizer

// addedSet matches a set of added tokens leftmost-longest with a byte trie.
type addedSet struct {
	// children maps node<<8 | byte to the child node.
	children map[uint32]uint32
	// id is the token id ending at each node, -1 where none does.
	id    []int64
	first [256]bool // bytes some token starts with
}

func newAddedSet() *addedSet {
	return &addedSet{children: map[uint32]uint32{}, id: []int64{-1}}
}

func (a *addedSet) add(content string, id uint32) {
	if content == "" {
		return
	}
	a.first[content[0]] = true
	node := uint32(0)
	for i := 0; i < len(content); i++ {
		key := node<<8 | uint32(content[i])
		child, ok := a.children[key]
		if !ok {
			child = uint32(len(a.id))
			a.id = append(a.id, -1)
			a.children[key] = child
		}
		node = child
	}
	a.id[node] = int64(id)
}

func (a *addedSet) empty() bool { return len(a.id) == 1 }

// longest returns the length and id of the longest token starting at s[i],
// or 0.
func (a *addedSet) longest(s string, i int) (n int, id uint32) {
	node := uint32(0)
	for j := i; j < len(s); j++ {
		child, ok := a.children[node<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = child
		if t := a.id[node]; t >= 0 {
			n, id = j+1-i, uint32(t)
		}
	}
	return n, id
}

// split calls text for every stretch of s between tokens (with its offset)
// and token for every token, in order; empty stretches are skipped.
func (a *addedSet) split(s string, text func(string, int) error, token func(uint32)) error {
	if a.empty() {
		if s == "" {
			return nil
		}
		return text(s, 0)
	}
	start := 0
	for i := 0; i < len(s); {
		if !a.first[s[i]] {
			i++
			continue
		}
		n, id := a.longest(s, i)
		if n == 0 {
			i++
			continue
		}
		if i > start {
			if err := text(s[start:i], start); err != nil {
				return err
			}
		}
		token(id)
		i += n
		start = i
	}
	if start < len(s) {
		return text(s[start:], start)
	}
	return nil
}
