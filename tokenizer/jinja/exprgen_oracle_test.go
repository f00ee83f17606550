package jinja

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
)

// exprGen builds random well-formed expressions over a small context.
//
// Known divergences it avoids: jinja2's optimizer folds constant
// sub-expressions at compile time, where a failed slice of a constant
// non-sequence is undefined instead of a TypeError (kvrouter folds only a
// whole constant output), prints a folded negative constant unparenthesized
// (so (-0.0) ** x is -(0.0 ** x)), and repr()s safe strings as Markup('…').
// Slices therefore apply to sequences only, leaves are non-negative, and
// the safe filter is left out. Python's unbounded ints (kvrouter fails
// beyond 64 bits with ErrLimit) and float powers (Go's math.Pow can be one
// ulp off C's pow) are not compared.
type exprGen struct{ rng *rand.Rand }

var (
	genLeaves = []string{
		"0", "1", "7", "2.5", "0.1", "1e3", "true", "false", "none",
		"'a'", "'Hello World'", "''", "' x '", "'日本'", "'a,b'", "\"it's\"",
		"[]", "[1, 2, 3]", "['b', 'a']", "(1, 'x')", "{}", "{'k': 1, 'a': [2]}",
		"s", "n", "i", "f", "l", "d", "u", "msgs", "msgs[0]", "d.k", "d['a']", "l[-1]", "nope",
	}
	genBinary  = []string{"+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"}
	genFilters = []string{
		"length", "string", "list", "first", "last", "lower", "upper", "trim", "capitalize", "title",
		"tojson", "tojson(indent=2)", "tojson(sort_keys=true)", "int", "float", "abs", "round", "default('D')",
		"join(',')", "join", "items|list", "dictsort", "sort", "reverse|list", "unique|list", "sum",
		"map(attribute='role')|list", "selectattr('role', 'equalto', 'user')|list", "rejectattr('x')|list",
		"select|list", "replace('a', 'b')", "indent(2)", "wordcount",
	}
	genTests   = []string{"defined", "undefined", "none", "string", "mapping", "sequence", "iterable", "number", "integer", "float", "boolean", "true", "false", "odd", "even", "in [1, 'a']", "equalto 1", "lower", "upper"}
	genMethods = []string{".strip()", ".split(',')", ".split()", ".upper()", ".lower()", ".startswith('a')", ".endswith('d')", ".replace('a', 'z')", ".title()", ".items()|list", ".keys()|list", ".values()|list", ".get('k')", ".get('zz', 0)", ".count('a')", ".index(1)", ".format(1)"}
)

func (g *exprGen) expr(depth int) string {
	if depth <= 0 {
		return genLeaves[g.rng.Intn(len(genLeaves))]
	}
	switch g.rng.Intn(9) {
	case 0, 1:
		return "(" + g.expr(depth-1) + " " + genBinary[g.rng.Intn(len(genBinary))] + " " + g.expr(depth-1) + ")"
	case 2:
		return "(" + g.expr(depth-1) + ")|" + genFilters[g.rng.Intn(len(genFilters))]
	case 3:
		return "(" + g.expr(depth-1) + " is " + []string{"", "not "}[g.rng.Intn(2)] + genTests[g.rng.Intn(len(genTests))] + ")"
	case 4:
		return "(" + g.expr(depth-1) + ")" + genMethods[g.rng.Intn(len(genMethods))]
	case 5:
		lo, hi := g.rng.Intn(5)-2, g.rng.Intn(5)-2
		return sliceable[g.rng.Intn(len(sliceable))] + []string{"[" + strconv.Itoa(lo) + "]", "[" + strconv.Itoa(lo) + ":]", "[:" + strconv.Itoa(hi) + "]", "[::-1]", fmt.Sprintf("[%d:%d]", lo, hi)}[g.rng.Intn(5)]
	case 6:
		return "(" + g.expr(depth-1) + " if " + g.expr(depth-1) + " else " + g.expr(depth-1) + ")"
	case 7:
		return "[" + g.expr(depth-1) + ", " + g.expr(depth-1) + "]"
	}
	return "not " + g.expr(depth-1)
}

// sliceable are the operands slices get.
var sliceable = []string{"s", "l", "u", "msgs", "'Hello World'", "[1, 2, 3]", "(1, 'x')", "n", "d", "i", "nope"}

const genContext = `{"s": "Hello, World", "n": null, "i": 42, "f": 1.5, "l": [3, 1, 2], "d": {"k": "v", "a": [1, 2]}, "u": "ünï",
	"msgs": [{"role": "user", "content": "hi", "x": 1}, {"role": "assistant", "content": "yo"}]}`

// TestExpressionsAgainstJinja2 prints random well-formed expressions with
// Go and with jinja2: same text or both fail. EXPRESSIONS=n runs n (default 2000), SEED=s another sequence.
func TestExpressionsAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("EXPRESSIONS")); err == nil {
		n = v
	}
	g := &exprGen{rng: rand.New(rand.NewSource(seed()))}
	srcs := make([]string, n)
	reqs := make([]any, n)
	for i := range srcs {
		srcs[i] = "{{ " + g.expr(1+g.rng.Intn(3)) + " }}"
		reqs[i] = map[string]any{"template": srcs[i], "context": json.RawMessage(genContext)}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := 0, 0
	for i, src := range srcs {
		out, err := renderCase(t, src, genContext)
		if errors.Is(err, ErrLimit) && res[i].Out != nil {
			continue // Python ints are unbounded; kvrouter's are 64 bits
		}
		if d := pyoracle.Check(out, err, res[i]); d != "" {
			if bad++; bad <= 30 {
				t.Errorf("%s: %s", src, strings.ReplaceAll(d, "\n", " "))
			}
		} else if err == nil {
			ok++
		}
	}
	t.Logf("%d of %d rendered identically, %d differ, the rest fail on both sides", ok, n, bad)
}

// seed is 5, or SEED from the environment.
func seed() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SEED"), 10, 64); err == nil {
		return v
	}
	return 5
}
