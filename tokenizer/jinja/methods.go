package jinja

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

type stringMethod func(r *renderer, s string, args []Value, kw kwargs) (Value, error)

var stringMethods map[string]stringMethod

func init() {
	stringMethods = map[string]stringMethod{
		"strip":        stripMethod(strings.Trim, strings.TrimFunc),
		"lstrip":       stripMethod(strings.TrimLeft, strings.TrimLeftFunc),
		"rstrip":       stripMethod(strings.TrimRight, strings.TrimRightFunc),
		"upper":        noArgs(upper),
		"lower":        noArgs(lower),
		"title":        noArgs(pyTitle),
		"capitalize":   noArgs(capitalize),
		"split":        splitMethod,
		"startswith":   affixMethod(strings.HasPrefix),
		"endswith":     affixMethod(strings.HasSuffix),
		"replace":      replaceMethod,
		"format":       formatMethod,
		"join":         joinMethod,
		"find":         findMethod,
		"count":        countMethod,
		"removeprefix": trimMethod(strings.TrimPrefix),
		"removesuffix": trimMethod(strings.TrimSuffix),
		"isdigit":      predMethod(unicode.IsDigit),
		"isalpha":      predMethod(unicode.IsLetter),
		"isspace":      predMethod(isSpace),
		"isalnum":      predMethod(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }),
		"isupper": func(_ *renderer, s string, _ []Value, _ kwargs) (Value, error) {
			return casedAll(s, unicode.IsUpper), nil
		},
		"islower": func(_ *renderer, s string, _ []Value, _ kwargs) (Value, error) {
			return casedAll(s, unicode.IsLower), nil
		},
		"rsplit":     rsplitMethod,
		"splitlines": splitlinesMethod,
		"rfind":      rfindMethod,
	}
}

func argErr(name string, want string) error {
	return fmt.Errorf("%w: %s() takes %s", ErrType, name, want)
}

func stringArg(v Value, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s must be str, not %s", ErrType, what, typeName(v))
	}
	return s, nil
}

func stripMethod(cut func(string, string) string, cutFunc func(string, func(rune) bool) string) stringMethod {
	return func(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
		if len(args) == 0 || args[0] == nil {
			return cutFunc(s, isSpace), nil
		}
		chars, err := stringArg(args[0], "strip arg")
		if err != nil {
			return nil, err
		}
		return cut(s, chars), nil
	}
}

func noArgs(f func(string) string) stringMethod {
	return func(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
		if len(args) > 0 {
			return nil, argErr("method", "no arguments")
		}
		return f(s), nil
	}
}

// upper and lower use full Unicode case mappings, as Python does
// ("ß".upper() == "SS").
func upper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	return cases.Upper(language.Und).String(s)
}

func lower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return cases.Lower(language.Und).String(s)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r, size := utf8.DecodeRuneInString(s) // size, not len(string(r)): an invalid byte is 1 wide
	return string(unicode.ToTitle(r)) + strings.ToLower(s[size:])
}

// pyTitle is str.title: a cased letter after an uncased one goes upper,
// other cased letters lower.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case cased && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case cased:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

func splitMethod(_ *renderer, s string, args []Value, kw kwargs) (Value, error) {
	var sep Value
	limit := int64(-1)
	if len(args) > 0 {
		sep = args[0]
	}
	if v, ok := kw.get("sep"); ok {
		sep = v
	}
	if len(args) > 1 {
		limit, _ = integer(args[1])
	}
	if v, ok := kw.get("maxsplit"); ok {
		limit, _ = integer(v)
	}
	var parts []string
	switch sp := sep.(type) {
	case nil:
		parts = splitWhitespace(s, limit)
	case string:
		if sp == "" {
			return nil, fmt.Errorf("%w: empty separator", ErrValue)
		}
		n := -1
		if limit >= 0 {
			n = int(min(limit, 1<<30)) + 1
		}
		parts = strings.SplitN(s, sp, n)
	default:
		return nil, fmt.Errorf("%w: must be str or None, not %s", ErrType, typeName(sep))
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return &List{Items: out}, nil
}

func splitWhitespace(s string, limit int64) []string {
	var parts []string
	for {
		s = strings.TrimLeftFunc(s, isSpace)
		if s == "" {
			return parts
		}
		if limit >= 0 && int64(len(parts)) == limit {
			return append(parts, s)
		}
		end := strings.IndexFunc(s, isSpace)
		if end < 0 {
			return append(parts, s)
		}
		parts = append(parts, s[:end])
		s = s[end:]
	}
}

func affixMethod(has func(string, string) bool) stringMethod {
	return func(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
		if len(args) != 1 {
			return nil, argErr("startswith/endswith", "one argument")
		}
		if t, ok := args[0].(*List); ok && t.Tuple {
			for _, it := range t.Items {
				a, err := stringArg(it, "tuple item")
				if err != nil {
					return nil, err
				}
				if has(s, a) {
					return true, nil
				}
			}
			return false, nil
		}
		a, err := stringArg(args[0], "argument")
		if err != nil {
			return nil, err
		}
		return has(s, a), nil
	}
}

func replaceMethod(r *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) < 2 {
		return nil, argErr("replace", "at least 2 arguments")
	}
	old, err := stringArg(args[0], "replace arg 1")
	if err != nil {
		return nil, err
	}
	repl, err := stringArg(args[1], "replace arg 2")
	if err != nil {
		return nil, err
	}
	n := -1
	if len(args) > 2 {
		c, _ := integer(args[2])
		n = int(max(min(c, 1<<30), -1))
	}
	return pyReplace(r, s, old, repl, n)
}

// pyReplace is str.replace (an empty old inserts between code points).
func pyReplace(r *renderer, s, old, repl string, n int) (Value, error) {
	count := strings.Count(s, old)
	if n >= 0 {
		count = min(count, n)
	}
	if err := r.checkLen(len(s) + count*(len(repl)-len(old))); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, repl, n), nil
}

func trimMethod(f func(string, string) string) stringMethod {
	return func(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
		if len(args) != 1 {
			return nil, argErr("removeprefix/removesuffix", "one argument")
		}
		a, err := stringArg(args[0], "argument")
		if err != nil {
			return nil, err
		}
		return f(s, a), nil
	}
}

func predMethod(f func(rune) bool) stringMethod {
	return func(_ *renderer, s string, _ []Value, _ kwargs) (Value, error) {
		if s == "" {
			return false, nil
		}
		for _, c := range s {
			if !f(c) {
				return false, nil
			}
		}
		return true, nil
	}
}

func joinMethod(r *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, argErr("join", "exactly one argument")
	}
	items, err := iterate(args[0])
	if err != nil {
		return nil, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		if parts[i], err = stringArg(it, fmt.Sprintf("sequence item %d", i)); err != nil {
			return nil, err
		}
	}
	out := strings.Join(parts, s)
	return out, r.checkLen(len(out))
}

func findMethod(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, argErr("find", "one argument")
	}
	sub, err := stringArg(args[0], "argument")
	if err != nil {
		return nil, err
	}
	i := strings.Index(s, sub)
	if i < 0 {
		return int64(-1), nil
	}
	return int64(len([]rune(s[:i]))), nil
}

func countMethod(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, argErr("count", "one argument")
	}
	sub, err := stringArg(args[0], "argument")
	if err != nil {
		return nil, err
	}
	if sub == "" {
		return int64(len([]rune(s)) + 1), nil
	}
	return int64(strings.Count(s, sub)), nil
}

func rsplitMethod(r *renderer, s string, args []Value, kw kwargs) (Value, error) {
	limit := int64(-1)
	if len(args) > 1 {
		limit, _ = integer(args[1])
	}
	if v, ok := kw.get("maxsplit"); ok {
		limit, _ = integer(v)
	}
	if limit < 0 {
		return splitMethod(r, s, args, kw)
	}
	var sep Value
	if len(args) > 0 {
		sep = args[0]
	}
	if v, ok := kw.get("sep"); ok {
		sep = v
	}
	sp, ok := sep.(string)
	if !ok || sp == "" {
		return nil, fmt.Errorf("%w: rsplit with maxsplit needs a non-empty separator", ErrValue)
	}
	var parts []string
	for int64(len(parts)) < limit {
		i := strings.LastIndex(s, sp)
		if i < 0 {
			break
		}
		parts = append(parts, s[i+len(sp):])
		s = s[:i]
	}
	parts = append(parts, s)
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[len(parts)-1-i] = p
	}
	return &List{Items: out}, nil
}

func splitlinesMethod(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) > 0 {
		return nil, argErr("splitlines", "no arguments")
	}
	var out []Value
	if s == "" {
		return &List{}, nil
	}
	for _, l := range strings.Split(normalizeNewlines(s), "\n") {
		out = append(out, l)
	}
	return &List{Items: out}, nil
}

func rfindMethod(_ *renderer, s string, args []Value, _ kwargs) (Value, error) {
	if len(args) != 1 {
		return nil, argErr("rfind", "one argument")
	}
	sub, err := stringArg(args[0], "argument")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndex(s, sub)
	if i < 0 {
		return int64(-1), nil
	}
	return int64(len([]rune(s[:i]))), nil
}
