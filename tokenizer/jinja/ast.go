package jinja

// stmt is a compiled statement; exec writes its output to r.
type stmt interface {
	exec(r *renderer, s *scope) error
}

// expr is a compiled expression.
type expr interface {
	eval(r *renderer, s *scope) (Value, error)
}

type (
	textStmt  struct{ text string }
	printStmt struct {
		e      expr
		folded bool // constant: jinja2 evaluates it at compile time
	}
	ifStmt struct {
		conds  []expr
		bodies [][]stmt
		els    []stmt
	}
	forStmt struct {
		target    target
		iter      expr
		cond      expr // nil: none
		body, els []stmt
		recursive bool
		// closes is set when the body defines a macro or a call block,
		// whose closure keeps its iteration's scope: every iteration
		// then gets a new scope instead of the cleared previous one.
		closes bool
	}
	setStmt struct {
		target target
		value  expr
	}
	setBlockStmt struct {
		target  target
		body    []stmt
		filters []*filterExpr // applied in order, arg nil
	}
	macroStmt struct{ def *macroDef }
	callStmt  struct {
		call   *callExpr
		caller *macroDef
	}
	filterBlockStmt struct {
		filters []*filterExpr
		body    []stmt
	}
	withStmt struct {
		targets []target
		values  []expr
		body    []stmt
	}
	breakStmt    struct{}
	continueStmt struct{}
)

// target is the left side of set or for: a name, a tuple of names, or a
// namespace attribute.
type target struct {
	name  string
	attr  string   // set ns.attr: name is the namespace
	names []string // unpacking
}

// macroDef is a macro's definition.
type macroDef struct {
	name     string
	params   []string
	defaults []expr // aligned to the end of params
	body     []stmt
}

type (
	constExpr struct{ v Value }
	nameExpr  struct {
		name  string
		undef Value // Undefined{Name: 'name'}, made once
	}
	listExpr struct {
		items []expr
		tuple bool
	}
	dictExpr struct{ keys, vals []expr }
	attrExpr struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct{ obj, lo, hi, step expr }
	callExpr  struct {
		fn   expr
		args callArgs
	}
	filterExpr struct {
		arg  expr // nil inside filter blocks
		name string
		args callArgs
	}
	testExpr struct {
		arg    expr
		name   string
		args   callArgs
		negate bool
	}
	notExpr   struct{ e expr }
	unaryExpr struct {
		e   expr
		neg bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	addExpr     struct{ parts []expr } // a + b + ...: at least two parts
	concatExpr  struct{ parts []expr }
	andExpr     struct{ l, r expr }
	orExpr      struct{ l, r expr }
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	condExpr struct{ cond, then, els expr } // els nil: undefined
)

// callArgs are the arguments of a call, filter or test.
type callArgs struct {
	pos     []expr
	kwNames []string
	kwVals  []expr
}
