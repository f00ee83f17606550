package jinja

func (p *parser) parseMacroSignature(def *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.skipOp(")") {
		if len(def.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.skipOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return err
		}
		def.params = append(def.params, name)
		if p.skipOp("=") {
			d, err := p.parseExpr(true)
			if err != nil {
				return err
			}
			def.defaults = append(def.defaults, d)
		} else if len(def.defaults) > 0 {
			return p.errorf("non-default argument follows default argument")
		}
	}
	return p.expectEnd()
}

func (p *parser) parseMacro() (stmt, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	def := &macroDef{name: name}
	if err := p.parseMacroSignature(def); err != nil {
		return nil, err
	}
	if err := p.inFunction(func() (err error) {
		def.body, _, err = p.parseBody("endmacro")
		return err
	}); err != nil {
		return nil, err
	}
	p.skipName(name)
	return &macroStmt{def}, p.expectEnd()
}

// parseCall parses {% call [(params)] macro(args) %}body{% endcall %}.
func (p *parser) parseCall() (stmt, error) {
	caller := &macroDef{name: "caller"}
	if p.isOp("(") {
		if err := p.parseMacroSignatureNoEnd(caller); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpr(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.errorf("expected call")
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	if err := p.inFunction(func() (err error) {
		caller.body, _, err = p.parseBody("endcall")
		return err
	}); err != nil {
		return nil, err
	}
	return &callStmt{call: call, caller: caller}, p.expectEnd()
}

// parseMacroSignatureNoEnd parses "(params)" of a call block.
func (p *parser) parseMacroSignatureNoEnd(def *macroDef) error {
	toks, ti := p.toks, p.ti
	// parse with a fake end: find the matching ")"
	depth := 0
	for i := ti; i < len(toks); i++ {
		if toks[i].kind != tokOp {
			continue
		}
		switch toks[i].val {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				p.toks = toks[:i+1]
				err := p.parseMacroSignature(def)
				p.toks, p.ti = toks, i+1
				return err
			}
		}
	}
	return p.errorf("unbalanced parentheses")
}

func (p *parser) parseFilterBlock() (stmt, error) {
	st := &filterBlockStmt{}
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		st.filters = append(st.filters, f)
		if !p.skipOp("|") {
			break
		}
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	var err error
	if st.body, _, err = p.parseBody("endfilter"); err != nil {
		return nil, err
	}
	return st, p.expectEnd()
}

func (p *parser) parseWith() (stmt, error) {
	st := &withStmt{}
	for p.peek().kind != tokEOF {
		if len(st.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpr(true)
		if err != nil {
			return nil, err
		}
		st.targets, st.values = append(st.targets, t), append(st.values, v)
	}
	var err error
	if st.body, _, err = p.parseBody("endwith"); err != nil {
		return nil, err
	}
	return st, p.expectEnd()
}
