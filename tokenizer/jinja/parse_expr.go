package jinja

import (
	"strconv"
	"strings"
)

// parseTuple parses an expression or an implicit tuple ("a, b").
func (p *parser) parseTuple() (expr, error) { return p.tuple(true) }

// parseTupleNoCond is parseTuple without conditional expressions (a for
// loop's iterable, where "if" starts the loop filter).
func (p *parser) parseTupleNoCond() (expr, error) { return p.tuple(false) }

func (p *parser) tuple(cond bool) (expr, error) {
	var items []expr
	comma := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			comma = true
		}
		if t := p.peek(); t.kind == tokEOF || p.isOp(")") || p.isName("recursive") || (!cond && p.isName("if")) {
			break
		}
		e, err := p.parseExpr(cond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if len(items) == 0 {
		return nil, p.errorf("expected an expression, got %s", describe(p.peek()))
	}
	if !comma {
		return items[0], nil
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) parseExpr(cond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	e, err := p.parseOr()
	if err != nil || !cond {
		return e, err
	}
	for p.skipName("if") {
		c, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		ce := &condExpr{cond: c, then: e}
		if p.skipName("else") {
			if ce.els, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		e = ce
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.skipName("or") {
		var r expr
		r, err = p.parseAnd()
		l = &orExpr{l, r}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.skipName("and") {
		var r expr
		r, err = p.parseNot()
		l = &andExpr{l, r}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		e, err := p.parseNot()
		return &notExpr{e}, err
	}
	return p.parseCompare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseBinary(0)
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tokOp && compareOps[t.val]:
			op = t.val
			p.ti++
		case p.skipName("in"):
			op = "in"
		case p.isName("not") && p.ti+1 < len(p.toks) && p.toks[p.ti+1].kind == tokName && p.toks[p.ti+1].val == "in":
			op = "notin"
			p.ti += 2
		default:
			if len(c.ops) == 0 {
				return first, nil
			}
			return c, nil
		}
		r, err := p.parseBinary(0)
		if err != nil {
			return nil, err
		}
		c.ops, c.rest = append(c.ops, op), append(c.rest, r)
	}
}

// binaryLevels are the binary operator levels, loosest first: math1,
// concat, math2, pow.
var binaryLevels = [][]string{{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}}

func (p *parser) parseBinary(level int) (expr, error) {
	if level == len(binaryLevels) {
		return p.parseUnary(true)
	}
	l, err := p.parseBinary(level + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.kind != tokOp || !containsOp(binaryLevels[level], t.val) {
			return l, nil
		}
		p.ti++
		r, err := p.parseBinary(level + 1)
		if err != nil {
			return nil, err
		}
		switch t.val {
		case "~":
			if c, ok := l.(*concatExpr); ok {
				c.parts = append(c.parts, r)
				continue
			}
			l = &concatExpr{parts: []expr{l, r}}
		case "+":
			// (a + b) + c is a + b + c: the same left fold.
			if a, ok := l.(*addExpr); ok {
				a.parts = append(a.parts, r)
				continue
			}
			l = &addExpr{parts: []expr{l, r}}
		default:
			l = &binExpr{op: t.val, l: l, r: r}
		}
	}
}

func containsOp(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	switch {
	case p.skipOp("-"):
		e, err = p.parseUnary(false)
		e = &unaryExpr{e: e, neg: true}
	case p.skipOp("+"):
		e, err = p.parseUnary(false)
		e = &unaryExpr{e: e}
	default:
		e, err = p.parsePrimary()
	}
	if err != nil {
		return nil, err
	}
	if e, err = p.parsePostfix(e); err != nil || !withFilter {
		return e, err
	}
	return p.parseFilterExpr(e)
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tokName:
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{name: t.val, undef: Undefined{Name: "'" + t.val + "'"}}, nil
	case tokString:
		var b strings.Builder
		b.WriteString(t.val)
		for p.peek().kind == tokString {
			b.WriteString(p.next().val)
		}
		return &constExpr{b.String()}, nil
	case tokInt:
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, p.errorf("integer %s out of range", t.val)
		}
		return &constExpr{n}, nil
	case tokFloat:
		f, _ := strconv.ParseFloat(t.val, 64)
		return &constExpr{f}, nil
	case tokOp:
		return p.parseBracketed(t.val)
	}
	return nil, p.errorf("unexpected %s", describe(t))
}

func (p *parser) parseBracketed(open string) (expr, error) {
	switch open {
	case "(":
		if p.skipOp(")") {
			return &listExpr{tuple: true}, nil
		}
		e, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		return e, p.expectOp(")")
	case "[":
		l := &listExpr{}
		for !p.skipOp("]") {
			if len(l.items) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
				if p.skipOp("]") {
					break
				}
			}
			e, err := p.parseExpr(true)
			if err != nil {
				return nil, err
			}
			l.items = append(l.items, e)
		}
		return l, nil
	case "{":
		return p.parseDict()
	}
	return nil, p.errorf("unexpected '%s'", open)
}

func (p *parser) parseDict() (expr, error) {
	d := &dictExpr{}
	for !p.skipOp("}") {
		if len(d.keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.skipOp("}") {
				break
			}
		}
		k, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		d.keys, d.vals = append(d.keys, k), append(d.vals, v)
	}
	return d, nil
}
