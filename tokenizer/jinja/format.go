package jinja

import (
	"fmt"
	"strconv"
	"strings"
)

// formatMethod is str.format for the plain fields chat templates use:
// "{}", "{0}", "{name}", "{{" and "}}"; format specs are refused.
func formatMethod(r *renderer, s string, args []Value, kw kwargs) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%w: single '{' encountered in format string", ErrValue)
		}
		v, err := formatField(s[i+1:i+end], &auto, args, kw)
		if err != nil {
			return nil, err
		}
		b.WriteString(str(v))
		if err := r.checkLen(b.Len()); err != nil {
			return nil, err
		}
		i += end
	}
	return b.String(), nil
}

func formatField(field string, auto *int, args []Value, kw kwargs) (Value, error) {
	if strings.ContainsAny(field, ":!.[") {
		return nil, fmt.Errorf("%w: format field %q not supported", ErrValue, field)
	}
	if field == "" {
		field = strconv.Itoa(*auto)
		*auto++
	}
	if n, err := strconv.Atoi(field); err == nil {
		if n < 0 || n >= len(args) {
			return nil, fmt.Errorf("%w: Replacement index %d out of range for positional args tuple", ErrValue, n)
		}
		return args[n], nil
	}
	if v, ok := kw.get(field); ok {
		return v, nil
	}
	return nil, fmt.Errorf("%w: KeyError %s", ErrValue, repr(field))
}

// printf is Python's format % args for %s, %r, %d, %i and %%.
func printf(format string, arg Value) (Value, error) {
	args := []Value{arg}
	if t, ok := arg.(*List); ok && t.Tuple {
		args = t.Items
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			b.WriteByte(format[i])
			continue
		}
		if i+1 >= len(format) {
			return nil, fmt.Errorf("%w: incomplete format", ErrValue)
		}
		i++
		verb := format[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if verb == '(' {
			end := strings.IndexByte(format[i:], ')')
			d, ok := arg.(*Dict)
			if end < 0 || i+end+1 >= len(format) || !ok {
				return nil, fmt.Errorf("%w: format requires a mapping", ErrType)
			}
			v, found := d.Get(format[i+1 : i+end])
			if !found {
				return nil, fmt.Errorf("%w: KeyError %s", ErrValue, repr(format[i+1:i+end]))
			}
			i += end + 1
			if err := printfVerb(&b, format[i], v); err != nil {
				return nil, err
			}
			n = len(args)
			continue
		}
		if n >= len(args) {
			return nil, fmt.Errorf("%w: not enough arguments for format string", ErrType)
		}
		if err := printfVerb(&b, verb, args[n]); err != nil {
			return nil, err
		}
		n++
	}
	if n < len(args) && !isMapping(arg) {
		return nil, fmt.Errorf("%w: not all arguments converted during string formatting", ErrType)
	}
	return b.String(), nil
}

func printfVerb(b *strings.Builder, verb byte, v Value) error {
	switch verb {
	case 's':
		b.WriteString(str(v))
	case 'r':
		b.WriteString(repr(v))
	case 'd', 'i':
		f, ok := number(v)
		if !ok {
			return fmt.Errorf("%w: %%%c format: a real number is required, not %s", ErrType, verb, typeName(v))
		}
		if i, ok := integer(v); ok {
			b.WriteString(strconv.FormatInt(i, 10))
		} else {
			b.WriteString(strconv.FormatFloat(float64(int64(f)), 'f', 0, 64))
		}
	default:
		return fmt.Errorf("%w: unsupported format character '%c'", ErrValue, verb)
	}
	return nil
}

// isMapping is what Python's %-formatting treats as a mapping argument
// (anything subscriptable but a tuple or a string): extra arguments are
// then not an error.
func isMapping(v Value) bool {
	switch x := v.(type) {
	case *Dict, Undefined:
		return true
	case *List:
		return !x.Tuple
	}
	return false
}
