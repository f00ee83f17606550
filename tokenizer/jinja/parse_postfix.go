package jinja

import "strconv"

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		var err error
		switch {
		case p.skipOp("."):
			t := p.next()
			switch t.kind {
			case tokName:
				e = &attrExpr{obj: e, name: t.val}
			case tokInt:
				n, _ := strconv.ParseInt(t.val, 10, 64)
				e = &itemExpr{obj: e, key: &constExpr{n}}
			default:
				return nil, p.errorf("expected name or number after '.'")
			}
		case p.skipOp("["):
			e, err = p.parseSubscript(e)
		case p.skipOp("("):
			var args callArgs
			args, err = p.parseCallArgs()
			e = &callExpr{fn: e, args: args}
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		var err error
		switch {
		case p.skipOp("|"):
			e, err = p.parseFilter(e)
		case p.skipName("is"):
			e, err = p.parseTest(e)
		case p.skipOp("("):
			var args callArgs
			args, err = p.parseCallArgs()
			e = &callExpr{fn: e, args: args}
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	for err == nil && p.skipOp(".") {
		var more string
		more, err = p.expectName()
		name += "." + more
	}
	return name, err
}

func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := filters[name]; !ok {
		return nil, p.errorf("no filter named '%s'", name)
	}
	f := &filterExpr{arg: arg, name: name}
	if p.skipOp("(") {
		if f.args, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	negate := p.skipName("not")
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := tests[name]; !ok {
		return nil, p.errorf("no test named '%s'", name)
	}
	t := &testExpr{arg: arg, name: name, negate: negate}
	if p.skipOp("(") {
		t.args, err = p.parseCallArgs()
		return t, err
	}
	if p.startsTestArg() {
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args.pos = []expr{a}
	}
	return t, nil
}

func (p *parser) startsTestArg() bool {
	t := p.peek()
	switch t.kind {
	case tokName:
		return t.val != "else" && t.val != "or" && t.val != "and"
	case tokString, tokInt, tokFloat:
		return true
	case tokOp:
		return t.val == "(" || t.val == "[" || t.val == "{"
	}
	return false
}

// parseCallArgs parses call arguments after "(" through ")".
func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	for !p.skipOp(")") {
		if len(a.pos)+len(a.kwNames) > 0 {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.skipOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return a, p.errorf("*args and **kwargs are not supported")
		}
		if t := p.peek(); t.kind == tokName && p.ti+1 < len(p.toks) && p.toks[p.ti+1].kind == tokOp && p.toks[p.ti+1].val == "=" {
			p.ti += 2
			v, err := p.parseExpr(true)
			if err != nil {
				return a, err
			}
			a.kwNames, a.kwVals = append(a.kwNames, t.val), append(a.kwVals, v)
			continue
		}
		if len(a.kwNames) > 0 {
			return a, p.errorf("invalid syntax for function call expression")
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return a, err
		}
		a.pos = append(a.pos, v)
	}
	return a, nil
}

// parseSubscript parses after "[": an index, a slice, or a tuple key.
func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	n, colon := 0, false
	for {
		switch {
		case p.skipOp(":"):
			colon = true
			n++
			if n > 2 {
				return nil, p.errorf("too many ':' in subscript")
			}
			continue
		case p.skipOp("]"):
			if !colon {
				if parts[0] == nil {
					return nil, p.errorf("expected subscript")
				}
				return &itemExpr{obj: obj, key: parts[0]}, nil
			}
			return &sliceExpr{obj: obj, lo: parts[0], hi: parts[1], step: parts[2]}, nil
		}
		if parts[n] != nil {
			return nil, p.errorf("expected ']'")
		}
		var e expr
		var err error
		if colon {
			e, err = p.parseExpr(true)
		} else {
			e, err = p.parseTuple()
		}
		if err != nil {
			return nil, err
		}
		parts[n] = e
	}
}
