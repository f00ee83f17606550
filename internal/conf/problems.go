package conf

import (
	"errors"
	"fmt"
	"strings"
)

// ErrConfig marks a configuration that cannot run: kvrouter exits with
// status 2.
var ErrConfig = errors.New("bad configuration")

// Problems is every configuration problem found, reported at once. Each
// starts with the yaml path of the field it is about (or a flag, or a
// file:line:col) followed by ": ".
type Problems struct{ List []string }

// Add records a problem.
func (p *Problems) Add(format string, args ...any) {
	p.List = append(p.List, fmt.Sprintf(format, args...))
}

// AddErr records each of err's leaf problems (LeafErrors) under section:
// "section.key: ..." for a package's "key: ..." problems.
func (p *Problems) AddErr(section string, err error) {
	for _, e := range LeafErrors(err) {
		p.Add("%s.%s", section, e)
	}
}

// Err returns p as an error, nil when there is no problem.
func (p *Problems) Err() error {
	if len(p.List) == 0 {
		return nil
	}
	return p
}

func (p *Problems) Error() string {
	var b strings.Builder
	if len(p.List) == 1 {
		b.WriteString("config: 1 problem:")
	} else {
		fmt.Fprintf(&b, "config: %d problems:", len(p.List))
	}
	for _, s := range p.List {
		b.WriteString("\n  - ")
		b.WriteString(s)
	}
	return b.String()
}

// Is makes every Problems an ErrConfig.
func (p *Problems) Is(target error) bool { return target == ErrConfig }

// LeafErrors flattens err's joined errors, and a prefix wrapped over
// them, into one problem each.
func LeafErrors(err error) []error {
	switch e := err.(type) { //nolint:errorlint // walks the tree errors.Is would
	case nil:
		return nil
	case interface{ Unwrap() []error }:
		var out []error
		for _, x := range e.Unwrap() {
			out = append(out, LeafErrors(x)...)
		}
		return out
	case interface{ Unwrap() error }:
		if _, join := e.Unwrap().(interface{ Unwrap() []error }); join { // a package's prefix over its joined problems
			return LeafErrors(e.Unwrap())
		}
	}
	return []error{err}
}
