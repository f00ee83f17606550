package jinja

import (
	"fmt"
	"slices"
)

// parser turns segments into statements.
type parser struct {
	segs     []segment
	si       int     // next segment
	toks     []token // tokens of the current tag
	ti       int
	line     int
	depth    int
	maxDepth int
	loops    int // enclosing for loops in the current macro (break, continue)
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrSyntax, p.line, fmt.Sprintf(format, args...))
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrLimit, p.maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) peek() token {
	if p.ti < len(p.toks) {
		return p.toks[p.ti]
	}
	return token{kind: tokEOF, line: p.line}
}

func (p *parser) next() token {
	t := p.peek()
	if p.ti < len(p.toks) {
		p.ti++
	}
	return t
}

func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.peek()
	return t.kind == tokName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.ti++
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.ti++
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected '%s', got %s", op, describe(p.peek()))
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.next()
	if t.kind != tokName {
		return "", p.errorf("expected a name, got %s", describe(t))
	}
	return t.val, nil
}

func (p *parser) expectEnd() error {
	if t := p.peek(); t.kind != tokEOF {
		return p.errorf("expected end of statement block, got %s", describe(t))
	}
	return nil
}

func describe(t token) string {
	if t.kind == tokEOF {
		return "end of tag"
	}
	return fmt.Sprintf("'%s'", t.val)
}

// parseBody parses statements up to one of the end tags, which it consumes
// (the rest of that tag stays in p.toks); end is "" at the end of source.
func (p *parser) parseBody(ends ...string) (body []stmt, end string, err error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	for p.si < len(p.segs) {
		seg := p.segs[p.si]
		p.si++
		p.toks, p.ti, p.line = seg.toks, 0, max(p.line, seg.line)
		switch seg.kind {
		case segText:
			body = append(body, &textStmt{seg.text})
			continue
		case segPrint:
			e, err := p.parseTuple()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectEnd(); err != nil {
				return nil, "", err
			}
			body = append(body, &printStmt{e: e, folded: isConst(e)})
			continue
		}
		name, err := p.expectName()
		if err != nil {
			return nil, "", err
		}
		if slices.Contains(ends, name) {
			return body, name, nil
		}
		st, err := p.parseStatement(name)
		if err != nil {
			return nil, "", err
		}
		body = append(body, st)
	}
	if len(ends) > 0 {
		return nil, "", p.errorf("unexpected end of template, expected '%s'", ends[len(ends)-1])
	}
	return body, "", nil
}

// statementParsers dispatches on a block tag's first word.
var statementParsers map[string]func(*parser) (stmt, error)

func init() {
	statementParsers = map[string]func(*parser) (stmt, error){
		"if":     (*parser).parseIf,
		"for":    (*parser).parseFor,
		"set":    (*parser).parseSet,
		"macro":  (*parser).parseMacro,
		"call":   (*parser).parseCall,
		"filter": (*parser).parseFilterBlock,
		"with":   (*parser).parseWith,
		"generation": func(p *parser) (stmt, error) {
			body, err := p.parseBlockBody("endgeneration")
			return &withStmt{body: body}, err
		},
		"break":    func(p *parser) (stmt, error) { return &breakStmt{}, p.loopControl("break") },
		"continue": func(p *parser) (stmt, error) { return &continueStmt{}, p.loopControl("continue") },
	}
}

func (p *parser) parseStatement(name string) (stmt, error) {
	fn, ok := statementParsers[name]
	if !ok {
		return nil, p.errorf("encountered unknown tag '%s'", name)
	}
	return fn(p)
}

func (p *parser) parseIf() (stmt, error) {
	st := &ifStmt{}
	for {
		cond, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		st.conds, st.bodies = append(st.conds, cond), append(st.bodies, body)
		switch end {
		case "else":
			if err := p.expectEnd(); err != nil {
				return nil, err
			}
			if st.els, _, err = p.parseBody("endif"); err != nil {
				return nil, err
			}
			return st, p.expectEnd()
		case "endif":
			return st, p.expectEnd()
		}
	}
}

func (p *parser) parseFor() (stmt, error) {
	st := &forStmt{}
	var err error
	if st.target, err = p.parseTarget(false); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf("expected 'in', got %s", describe(p.peek()))
	}
	if st.iter, err = p.parseTupleNoCond(); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if st.cond, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	st.recursive = p.skipName("recursive")
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	p.loops++
	body, end, err := p.parseBody("endfor", "else")
	p.loops--
	if err != nil {
		return nil, err
	}
	st.body = body
	if end == "else" {
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		if st.els, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return st, p.expectEnd()
}

// parseTarget parses a name, a.b (with attr) or a tuple of names.
func (p *parser) parseTarget(attr bool) (target, error) {
	paren := p.skipOp("(")
	name, err := p.expectName()
	if err != nil {
		return target{}, err
	}
	if attr && !paren && p.skipOp(".") {
		a, err := p.expectName()
		return target{name: name, attr: a}, err
	}
	names, comma := []string{name}, false
	for p.skipOp(",") {
		comma = true
		if p.peek().kind != tokName || p.isName("in") {
			break
		}
		n, _ := p.expectName()
		names = append(names, n)
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return target{}, err
		}
	}
	if comma || paren {
		return target{names: names}, nil
	}
	return target{name: name}, nil
}

func (p *parser) parseSet() (stmt, error) {
	t, err := p.parseTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		return &setStmt{t, v}, p.expectEnd()
	}
	st := &setBlockStmt{target: t}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		st.filters = append(st.filters, f)
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	if st.body, _, err = p.parseBody("endset"); err != nil {
		return nil, err
	}
	return st, p.expectEnd()
}

// parseBlockBody parses the end of a bare block tag, its body and its end
// tag.
func (p *parser) parseBlockBody(end string) ([]stmt, error) {
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody(end)
	if err != nil {
		return nil, err
	}
	return body, p.expectEnd()
}

// loopControl checks a break or continue: like Python, jinja2 refuses one
// outside a loop of the same macro when compiling.
func (p *parser) loopControl(name string) error {
	if p.loops == 0 {
		return p.errorf("'%s' outside loop", name)
	}
	return p.expectEnd()
}

// inFunction parses what jinja2 compiles to a function of its own (a
// macro or call block body): loops outside it do not count.
func (p *parser) inFunction(parse func() error) error {
	saved := p.loops
	p.loops = 0
	err := parse()
	p.loops = saved
	return err
}
