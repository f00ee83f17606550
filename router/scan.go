package router

import (
	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// bodyScan is what one pass over a request body gathers: for each
// top-level member the router checks, the kind of its value and the value
// itself (the last of repeated keys wins, as in encoding/json and Python's
// json.loads); for a completion, the prompt; for a chat request, the chat
// template's input, decoded into jinja values where the lexer meets it.
// Parse checks it all afterwards, in a fixed order, so that a body with
// several faults always gets the same 400.
type bodyScan struct {
	lx                            jsonlex.Lexer
	kind                          Kind
	model, cacheSalt, stream      member
	maxTokens, previousResponseID member
	prompt                        promptScan
	chat                          chat.Fields
	anthropic                     chat.AnthropicFields
	responses                     chat.ResponsesFields
}

// member is what the scan kept of a top-level member: the kind of its
// value (Invalid when absent), and the value when a string, a number (its
// JSON text) or a bool.
type member struct {
	kind jsonlex.Kind
	str  string
	b    bool
}

func (m *member) absent() bool { return m.kind == jsonlex.Invalid || m.kind == jsonlex.Null }

// run walks body, which must be one JSON object of valid UTF-8, as vLLM's
// json.loads reads it.
func (s *bodyScan) run(body []byte) error {
	s.lx.Reset(body, jsonlex.Options{InvalidUTF8: jsonlex.RejectInvalid})
	err := s.lx.Object(s.member)
	if err == nil {
		err = s.lx.End()
	}
	return err
}

// member reads the value of the top-level member key.
func (s *bodyScan) member(key []byte) error {
	switch string(key) {
	case "model":
		return s.read(&s.model)
	case "cache_salt":
		return s.read(&s.cacheSalt)
	case "stream":
		return s.read(&s.stream)
	case "prompt":
		if s.kind == KindCompletion {
			return s.readPrompt()
		}
	case "max_tokens":
		if s.kind == KindMessages {
			return s.read(&s.maxTokens)
		}
	case "previous_response_id":
		if s.kind == KindResponses {
			return s.read(&s.previousResponseID)
		}
	}
	var ok bool
	var err error
	switch s.kind {
	case KindChat:
		ok, err = s.chat.Decode(key, &s.lx)
	case KindMessages:
		ok, err = s.anthropic.Decode(key, &s.lx)
	case KindResponses:
		ok, err = s.responses.Decode(key, &s.lx)
	}
	if ok {
		return err
	}
	return s.lx.Skip()
}

// read reads a member's value into m.
func (s *bodyScan) read(m *member) error {
	*m = member{kind: s.lx.Peek()}
	var err error
	switch m.kind {
	case jsonlex.String:
		m.str, err = s.lx.Str()
	case jsonlex.Bool:
		m.b, err = s.lx.Bool()
	case jsonlex.Number:
		var tok []byte
		tok, err = s.lx.Number()
		m.str = string(tok)
	default:
		err = s.lx.Skip()
	}
	return err
}

// promptScan is what the scan kept of a completion's prompt: a string, a
// list of strings (a batch: the router routes by the first), a list of
// token ids, or a list of lists of token ids.
type promptScan struct {
	kind     jsonlex.Kind // of the prompt; Invalid when absent
	text     string       // the string, or a list's first string
	n        int          // a list's elements
	kinds    [3]bool      // a list holds strings, lists, other values
	first    jsonlex.Kind // of a list's first element
	firstIDs []uint32     // a list of lists' first list
	ids      []uint32     // a flat list's token ids
	badIDs   bool         // a flat list's element is not a token id
	badLists bool         // an element of a list of lists is not a list of token ids
}

// readPrompt reads the prompt, keeping what parsePrompt checks.
func (s *bodyScan) readPrompt() error {
	p := &s.prompt
	*p = promptScan{kind: s.lx.Peek()}
	switch p.kind {
	case jsonlex.String:
		var err error
		p.text, err = s.lx.Str()
		return err
	case jsonlex.Array:
		return s.lx.Array(s.promptElement)
	}
	return s.lx.Skip()
}

func (s *bodyScan) promptElement() error {
	p := &s.prompt
	k := s.lx.Peek()
	first := p.n == 0
	if first {
		p.first = k
	}
	p.n++
	switch k {
	case jsonlex.String:
		p.kinds[0] = true
		if first {
			var err error
			p.text, err = s.lx.Str()
			return err
		}
		return s.lx.Skip()
	case jsonlex.Array:
		p.kinds[1] = true
		if first {
			p.firstIDs = []uint32{}
		}
		return s.lx.Array(func() error {
			id, ok, err := s.tokenID()
			p.badLists = p.badLists || !ok
			if first && ok {
				p.firstIDs = append(p.firstIDs, id)
			}
			return err
		})
	}
	p.kinds[2] = true
	id, ok, err := s.tokenID()
	p.badIDs = p.badIDs || !ok
	if ok {
		p.ids = append(p.ids, id)
	}
	return err
}

// tokenID reads a value that must be a token id: an integer in [0, 2^32).
// ok is false for any other value, which is read all the same.
func (s *bodyScan) tokenID() (id uint32, ok bool, err error) {
	if s.lx.Peek() != jsonlex.Number {
		return 0, false, s.lx.Skip()
	}
	tok, err := s.lx.Number()
	if err != nil {
		return 0, false, err
	}
	var n uint64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false, nil // a sign, a fraction or an exponent
		}
		if n = n*10 + uint64(c-'0'); n > 1<<32-1 {
			return 0, false, nil
		}
	}
	return uint32(n), true, nil
}
