package conf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type section struct {
	Name  string        `yaml:"name"`
	Wait  time.Duration `yaml:"wait"`
	Count int           `yaml:"count"`
	On    bool          `yaml:"on"`
	List  []string      `yaml:"list"`
}

type inline struct {
	Depth int `yaml:"depth"`
}

type root struct {
	A      section `yaml:"a"`
	inline `yaml:",inline"`
}

// TestDecodeYAML: every problem of a file at once, each at its line and
// column with its field's path, in a user's words; a removed key says what
// replaced it; the good fields decode all the same.
func TestDecodeYAML(t *testing.T) {
	data := "a:\n  name: x\n  count: many\n  wait: [1]\n  old: 3\n  color: red\ndepth: 4\n"
	var r root
	got, at := DecodeYAML("f.yaml", []byte(data), &r, map[string]string{"a.old": "renamed a.count"})
	want := []string{
		`f.yaml:3:10: a.count: "many", want an integer`,
		"f.yaml:4:9: a.wait: a list, want a duration",
		"f.yaml:5:3: a.old: renamed a.count",
		"f.yaml:6:3: a.color: unknown field",
	}
	if len(got) != len(want) {
		t.Fatalf("problems = %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	if r.A.Name != "x" || r.Depth != 4 {
		t.Errorf("decoded %+v, want the good fields set", r)
	}
	if p := at["a.name"]; p != (Position{2, 9}) {
		t.Errorf("position of a.name = %v, want 2:9", p)
	}
	if got := at.Locate("f.yaml", "a.name.deeper: bad"); got != "f.yaml:2:9: a.name.deeper: bad" {
		t.Errorf("Locate = %q, want the nearest field's position", got)
	}
	if got := at.Locate("f.yaml", "--flag: bad"); got != "--flag: bad" {
		t.Errorf("Locate of a flag's problem = %q, want it as it is", got)
	}
	if got, _ := DecodeYAML("f.yaml", []byte("depth: 1\n---\ndepth: 2\n"), &r, nil); len(got) != 1 || !strings.Contains(got[0], "want a single YAML document") {
		t.Errorf("two documents: %q, want one problem", got)
	}
	if got, _ := DecodeYAML("f.yaml", nil, &r, nil); len(got) != 0 {
		t.Errorf("an empty file: %q, want nothing said", got)
	}
}

// TestTableBind: every kind a field holds becomes its flag, with the
// field's value as its default, and sets the field; a list flag replaces
// the list at its first use.
func TestTableBind(t *testing.T) {
	r := root{A: section{Name: "n", Count: 2, List: []string{"from-file"}}}
	table := Table{
		{Name: "name", Path: "a.name"},
		{Name: "wait", Path: "a.wait"},
		{Name: "count", Path: "a.count"},
		{Name: "on", Path: "a.on"},
		{Name: "item", Path: "a.list"},
		{Name: "depth", Path: "depth"},
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	table.Bind(fs, &r)
	if d := fs.Lookup("count").DefValue; d != "2" {
		t.Errorf("--count default %q, want the field's 2", d)
	}
	if err := fs.Parse([]string{"--name", "m", "--wait", "2s", "--count", "3", "--on", "--item", "x", "--item", "y", "--depth", "5"}); err != nil {
		t.Fatal(err)
	}
	want := root{A: section{Name: "m", Wait: 2 * time.Second, Count: 3, On: true, List: []string{"x", "y"}}, inline: inline{Depth: 5}}
	if fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("bound fields = %+v, want %+v", r, want)
	}
	if table.FlagFor("a.wait") != "wait" || table.PathOf("depth") != "depth" || table.FlagFor("a.none") != "" {
		t.Error("FlagFor and PathOf disagree with the table")
	}
	defer func() {
		if recover() == nil {
			t.Error("Bind of an unknown path did not panic")
		}
	}()
	Table{{Name: "x", Path: "a.none"}}.Bind(pflag.NewFlagSet("t", pflag.ContinueOnError), &r)
}

// TestRemoved: a removed flag is a problem naming what replaced it, never
// "unknown flag"; a former switch may be given bare.
func TestRemoved(t *testing.T) {
	var problems []string
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	Removed(fs, map[string]string{"old-wait": "a.wait", "old-on": "a.gone"}, map[string]string{"a.gone": "removed: always on"}, []string{"old-on"}, &problems)
	if err := fs.Parse([]string{"--old-wait", "1s", "--old-on"}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(problems)
	want := []string{"--old-on: removed: always on", "--old-wait: removed: set a.wait in the config file (--config)"}
	if !slices.Equal(problems, want) {
		t.Errorf("problems = %q, want %q", problems, want)
	}
}

// TestProblems: one error for every problem, an ErrConfig, a package's
// prefix over its joined problems dropped so each is under its key.
func TestProblems(t *testing.T) {
	p := &Problems{}
	if p.Err() != nil {
		t.Fatal("no problem, yet an error")
	}
	p.AddErr("sec", fmt.Errorf("pkg: %w", errors.Join(errors.New("a: bad"), errors.New("b: worse"))))
	p.Add("c: %d", 3)
	err := p.Err()
	if !errors.Is(err, ErrConfig) || err.Error() != "config: 3 problems:\n  - sec.a: bad\n  - sec.b: worse\n  - c: 3" {
		t.Errorf("Err() = %q", err)
	}
	if Key("sec.list[2].x: bad") != "sec.list[2].x" || Key("--flag: bad") != "" {
		t.Error("Key does not find a problem's path")
	}
}
