package conf

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Flag is a command-line flag that sets one field of a configuration, named
// by its yaml path.
type Flag struct{ Name, Path, Help string }

// Table is a command's flags over its configuration, in the order --help
// lists them.
type Table []Flag

// Bind defines t's flags on fs, each over its field of *root (a pointer to
// the configuration struct), with the field's value as its default. A
// field of a kind flags cannot set is a programming error: Bind panics.
func (t Table) Bind(fs *pflag.FlagSet, root any) {
	for _, f := range t {
		v := fieldByPath(reflect.ValueOf(root).Elem(), f.Path)
		if v.Kind() == reflect.String { // string and named string types
			fs.Var(stringField{v}, f.Name, f.Help)
			continue
		}
		switch p := v.Addr().Interface().(type) {
		case *bool:
			fs.BoolVar(p, f.Name, *p, f.Help)
		case *int:
			fs.IntVar(p, f.Name, *p, f.Help)
		case *time.Duration:
			fs.DurationVar(p, f.Name, *p, f.Help)
		case *[]string:
			fs.Var(NewList(p), f.Name, f.Help)
		default:
			panic(fmt.Sprintf("flag --%s: %s holds a %T", f.Name, f.Path, p))
		}
	}
}

// Set sets the field of *root (a pointer to the configuration struct) at
// path from value as a flag bound to it would read it; a value of the
// wrong form is an error.
func Set(root any, path, value string) error {
	fs := pflag.NewFlagSet("set", pflag.ContinueOnError)
	Table{{Name: "x", Path: path}}.Bind(fs, root)
	return fs.Set("x", value)
}

// FlagFor is the flag that sets the field at path; "" for none.
func (t Table) FlagFor(path string) string {
	for _, f := range t {
		if f.Path == path {
			return f.Name
		}
	}
	return ""
}

// PathOf is the field a flag sets; "" for a flag that sets no single field.
func (t Table) PathOf(name string) string {
	for _, f := range t {
		if f.Name == name {
			return f.Path
		}
	}
	return ""
}

// fieldByPath is the field of the struct v whose yaml key path is path.
func fieldByPath(v reflect.Value, path string) reflect.Value {
	for key := range strings.SplitSeq(path, ".") {
		f, ok := yamlField(v, key)
		if !ok {
			panic("config: no field " + path)
		}
		v = f
	}
	return v
}

// yamlField is the field of the struct v whose yaml key is key, looked for
// in its inline structs too.
func yamlField(v reflect.Value, key string) (reflect.Value, bool) {
	for i := range v.NumField() {
		name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		switch {
		case name == key:
			return v.Field(i), true
		case opts == "inline":
			if f, ok := yamlField(v.Field(i), key); ok {
				return f, true
			}
		}
	}
	return reflect.Value{}, false
}

// stringField is a flag over a field of any string kind.
type stringField struct{ v reflect.Value }

func (f stringField) String() string         { return f.v.String() }
func (f stringField) Set(value string) error { f.v.SetString(value); return nil }
func (f stringField) Type() string           { return "string" }

// NewList is a repeated flag collected into *dst, replacing what it held
// (a config file's list) at its first use; a pflag.SliceValue too.
func NewList(dst *[]string) pflag.Value { return &list{dst: dst} }

type list struct {
	dst *[]string
	set bool
}

func (l *list) String() string {
	if l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, " ")
}

func (l *list) Set(v string) error {
	if !l.set {
		*l.dst, l.set = nil, true
	}
	*l.dst = append(*l.dst, v)
	return nil
}

func (l *list) Type() string { return "strings" }

func (l *list) Append(v string) error { return l.Set(v) }

func (l *list) Replace(vs []string) error {
	*l.dst, l.set = append([]string(nil), vs...), true
	return nil
}

func (l *list) GetSlice() []string { return *l.dst }

// Removed defines flags that no longer exist, hidden, so that using one is
// a problem that says what replaced it rather than "unknown flag". flags
// maps each to the config key it set; removedKeys says what became of a
// key that no longer exists; a key that still does is set in the config
// file now. The flags in switches may still be given bare.
func Removed(fs *pflag.FlagSet, flags, removedKeys map[string]string, switches []string, problems *[]string) {
	for name, key := range flags {
		msg, gone := removedKeys[key]
		if !gone {
			msg = "removed: set " + key + " in the config file (--config)"
		}
		fs.Var(removedFlag{name: name, msg: msg, problems: problems}, name, msg)
		_ = fs.MarkHidden(name)
		if slices.Contains(switches, name) {
			fs.Lookup(name).NoOptDefVal = "true"
		}
	}
}

// removedFlag records a problem when it is set.
type removedFlag struct {
	name, msg string
	problems  *[]string
}

func (f removedFlag) String() string { return "" }

func (f removedFlag) Set(string) error {
	*f.problems = append(*f.problems, fmt.Sprintf("--%s: %s", f.name, f.msg))
	return nil
}

func (f removedFlag) Type() string { return "removed" }
