package jinja

// isConst reports whether jinja2's optimizer could fold e at compile time:
// it involves no variables and no calls.
func isConst(e expr) bool {
	switch x := e.(type) {
	case nil, *constExpr:
		return true
	case *listExpr:
		return allConst(x.items...)
	case *dictExpr:
		return allConst(x.keys...) && allConst(x.vals...)
	case *notExpr:
		return isConst(x.e)
	case *unaryExpr:
		return isConst(x.e)
	case *binExpr:
		return allConst(x.l, x.r)
	case *andExpr:
		return allConst(x.l, x.r)
	case *orExpr:
		return allConst(x.l, x.r)
	case *addExpr:
		return allConst(x.parts...)
	case *concatExpr:
		return allConst(x.parts...)
	case *compareExpr:
		return isConst(x.first) && allConst(x.rest...)
	case *condExpr:
		return x.els != nil && allConst(x.cond, x.then, x.els)
	case *filterExpr:
		return x.arg != nil && isConst(x.arg) && constArgs(x.args)
	case *testExpr:
		return isConst(x.arg) && constArgs(x.args)
	case *sliceExpr:
		return allConst(x.obj, x.lo, x.hi, x.step)
	case *itemExpr:
		return allConst(x.obj, x.key)
	case *attrExpr:
		return isConst(x.obj)
	}
	return false
}

func allConst(es ...expr) bool {
	for _, e := range es {
		if !isConst(e) {
			return false
		}
	}
	return true
}

func constArgs(a callArgs) bool { return allConst(a.pos...) && allConst(a.kwVals...) }
