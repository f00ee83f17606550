package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Position is where a value is in a YAML file.
type Position struct{ Line, Column int }

// Positions are where each field's value is in a YAML file, by yaml path
// ("a.b", "a.list[2]").
type Positions map[string]Position

// DecodeFile decodes a YAML file strictly into v and returns what was wrong
// with it (an unknown field, a value of the wrong type, a syntax error, a
// second document), each with its line, column and field path, and where
// each field's value is. The fields without a problem are decoded all the
// same. removed maps the paths of fields that no longer exist to what
// replaced them, said instead of "unknown field".
func DecodeFile(path string, v any, removed map[string]string) ([]string, Positions) {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}, nil
	}
	return DecodeYAML(path, data, v, removed)
}

// DecodeYAML is DecodeFile on data read from path.
func DecodeYAML(path string, data []byte, v any, removed map[string]string) ([]string, Positions) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []string{yamlProblem(path, err, nil, nil)}, nil
	}
	where := Positions{}
	paths := map[Position]string{}
	if len(doc.Content) == 1 {
		walkYAML(doc.Content[0], "", where, paths)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil, where // an empty file: nothing said
	}
	if err != nil {
		var le *yaml.LoadErrors
		if errors.As(err, &le) {
			out := make([]string, 0, len(le.Errors))
			for _, e := range le.Errors {
				out = append(out, yamlProblem(path, e, paths, removed))
			}
			return out, where
		}
		return []string{yamlProblem(path, err, paths, removed)}, where
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return []string{fmt.Sprintf("%s:%d:%d: want a single YAML document", path, extra.Line, extra.Column)}, where
	}
	return nil, where
}

// walkYAML records the position of every value under n, and the path of
// every key and value position.
func walkYAML(n *yaml.Node, path string, where Positions, paths map[Position]string) {
	at := Position{n.Line, n.Column}
	if path != "" {
		where[path] = at
		paths[at] = path
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			paths[Position{k.Line, k.Column}] = p
			walkYAML(val, p, where, paths)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walkYAML(c, fmt.Sprintf("%s[%d]", path, i), where, paths)
		}
	}
}

// yamlTypeWords are the YAML decoder's words for what a field holds, in a
// user's.
var (
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	cannotHold   = regexp.MustCompile("^cannot (?:construct|unmarshal) !!(\\w+)(?: `(.*)`)? into (\\S+)$")
	yamlPrefix   = regexp.MustCompile(`^(?:yaml: )?(?:unmarshal errors: )?(?:line \d+: )?`)
)

// yamlProblem says one YAML error as FILE:LINE:COLUMN: PATH: what is wrong,
// never in Go's words.
func yamlProblem(file string, err error, paths map[Position]string, removed map[string]string) string {
	msg, at := err.Error(), Position{}
	var le *yaml.LoadError
	if errors.As(err, &le) {
		msg, at = le.Message, Position{le.Mark.Line, le.Mark.Column}
	}
	for range 3 { // a field's own UnmarshalYAML error arrives wrapped
		msg = yamlPrefix.ReplaceAllString(msg, "")
	}
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		msg = "unknown field"
		if why, ok := removed[paths[at]]; ok {
			msg = why
		}
	} else if m := cannotHold.FindStringSubmatch(msg); m != nil {
		got := map[string]string{"seq": "a list", "map": "a mapping", "null": "nothing"}[m[1]]
		if got == "" {
			got = strconv.Quote(m[2])
		}
		msg = fmt.Sprintf("%s, want %s", got, goTypeWords(m[3]))
	}
	where := file
	if at.Line > 0 {
		where = fmt.Sprintf("%s:%d:%d", file, at.Line, at.Column)
	}
	if p, ok := paths[at]; ok {
		return where + ": " + p + ": " + msg
	}
	return where + ": " + msg
}

// goTypeWords says what a Go type holds, as YAML.
func goTypeWords(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "main."):
		return "a mapping"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case t == "time.Duration":
		return `a duration such as "1.5s" or "2m"`
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "another kind of value"
}

// problemKey is the config path a problem starts with.
var problemKey = regexp.MustCompile(`^[a-z_]+(?:\.[a-z_0-9-]+|\[\d+\])*`)

// Key is the yaml path a problem starts with, "" for none.
func Key(problem string) string { return problemKey.FindString(problem) }

// Locate prefixes a problem about a field of the YAML file ps came from
// with the file, line and column of the value (or of the nearest field
// holding it); a problem about no field of the file is returned as it is.
func (ps Positions) Locate(file, problem string) string {
	for k := problemKey.FindString(problem); k != ""; k = parentPath(k) {
		if at, ok := ps[k]; ok {
			return fmt.Sprintf("%s:%d:%d: %s", file, at.Line, at.Column, problem)
		}
	}
	return problem
}

// parentPath is the path of the field that holds path's, "" at the top.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}
