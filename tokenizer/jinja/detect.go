package jinja

// LoopsOverContent reports whether the template iterates over a message's
// content ({% for part in message['content'] %} where message comes from a
// loop over messages), the way vLLM detects that a template wants content
// as a list of parts ("openai" format) rather than a string.
func (t *Template) LoopsOverContent() bool { return t.loopsContent }

func loopsOverContent(body []stmt) bool {
	var fors []*forStmt
	var sets []*setStmt
	walk(body, func(s stmt) {
		switch x := s.(type) {
		case *forStmt:
			fors = append(fors, x)
		case *setStmt:
			sets = append(sets, x)
		}
	})
	msgs := aliases(sets, "messages")
	var loopVars []string
	for _, f := range fors {
		if f.target.name == "" || f.target.attr != "" {
			continue
		}
		for _, m := range msgs {
			if isAccess(f.iter, m, "") {
				loopVars = append(loopVars, f.target.name)
				break
			}
		}
	}
	for _, f := range fors {
		for _, v := range loopVars {
			if isAccess(f.iter, v, "content") {
				return true
			}
		}
	}
	return false
}

// aliases returns name and every variable set (transitively) from it.
func aliases(sets []*setStmt, name string) []string {
	out, todo := []string{name}, []string{name}
	for len(todo) > 0 {
		cur := todo[0]
		todo = todo[1:]
		for _, s := range sets {
			if !isAccess(s.value, cur, "") || s.target.name == "" || s.target.attr != "" {
				continue
			}
			out = append(out, s.target.name)
			if s.target.name != cur && len(out) < 1000 {
				todo = append(todo, s.target.name)
			}
		}
	}
	return out
}

// isAccess reports whether e is the variable name (key == "") or its
// attribute or item key, possibly filtered, tested or sliced.
func isAccess(e expr, name, key string) bool {
	switch x := e.(type) {
	case *filterExpr:
		return x.arg != nil && isAccess(x.arg, name, key)
	case *testExpr:
		return isAccess(x.arg, name, key)
	case *sliceExpr:
		return isAccess(x.obj, name, key)
	}
	if key == "" {
		n, ok := e.(*nameExpr)
		return ok && n.name == name
	}
	switch x := e.(type) {
	case *itemExpr:
		c, ok := x.key.(*constExpr)
		return ok && c.v == key && isName(x.obj, name)
	case *attrExpr:
		return x.name == key && isName(x.obj, name)
	}
	return false
}

func isName(e expr, name string) bool {
	n, ok := e.(*nameExpr)
	return ok && n.name == name
}

// markClosures sets closes on the loops whose bodies define macros or
// call blocks.
func markClosures(body []stmt) {
	walk(body, func(s stmt) {
		if f, ok := s.(*forStmt); ok {
			walk(f.body, func(s stmt) {
				switch s.(type) {
				case *macroStmt, *callStmt:
					f.closes = true
				}
			})
		}
	})
}

// walk calls fn on every statement, nested ones included.
func walk(body []stmt, fn func(stmt)) {
	for _, s := range body {
		fn(s)
		switch x := s.(type) {
		case *ifStmt:
			for _, b := range x.bodies {
				walk(b, fn)
			}
			walk(x.els, fn)
		case *forStmt:
			walk(x.body, fn)
			walk(x.els, fn)
		case *setBlockStmt:
			walk(x.body, fn)
		case *macroStmt:
			walk(x.def.body, fn)
		case *callStmt:
			walk(x.caller.body, fn)
		case *filterBlockStmt:
			walk(x.body, fn)
		case *withStmt:
			walk(x.body, fn)
		}
	}
}
