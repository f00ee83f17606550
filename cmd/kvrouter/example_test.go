package main

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/kvevents/discovery"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// TestExampleConfig: the example loads, validates and says exactly the
// defaults.
func TestExampleConfig(t *testing.T) {
	c, err := loadConfig([]string{"--config", exampleConfig})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.validate(""); err != nil {
		t.Fatalf("the example config: %v", err)
	}
	c.file, c.positions, c.flagsSet, c.picker = "", nil, nil, nil
	if len(c.Tokenizers.Models) == 0 {
		c.Tokenizers.Models = nil
	}
	if len(c.Pods.Static) == 0 {
		c.Pods.Static = nil
	}
	if len(c.Objectives) == 0 {
		c.Objectives = nil
	}
	if len(c.Discovery.Namespaces) == 0 {
		c.Discovery.Namespaces = nil
	}
	if want := defaultConfig(); !reflect.DeepEqual(c, want) {
		t.Errorf("the example config = %+v\nwant the defaults %+v", c, want)
	}
}

// TestExampleDocumentsEveryField walks the config by reflection: every
// field is in the example with a comment (a list's item fields in the
// list's comment), and every serve flag is named there.
func TestExampleDocumentsEveryField(t *testing.T) {
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	paths := yamlPaths(reflect.TypeFor[config](), nil)
	if len(paths) < 20 {
		t.Fatalf("found %d yaml fields in config, want them all: %v", len(paths), paths)
	}
	for _, path := range paths {
		if i := slices.Index(path, "[]"); i >= 0 {
			key := lookup(doc.Content[0], path[:i])
			if key == nil || !strings.Contains(key.HeadComment, " "+path[i+1]+": ") {
				t.Errorf("example: the comment of %s does not show the item field %s", strings.Join(path[:i], "."), path[i+1])
			}
			continue
		}
		key := lookup(doc.Content[0], path)
		switch {
		case key == nil:
			t.Errorf("example: %s is missing", strings.Join(path, "."))
		case key.HeadComment == "" && key.LineComment == "":
			t.Errorf("example: %s has no comment", strings.Join(path, "."))
		}
	}
	var c config
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	serveFlags(&c, fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			if _, ok := removedFlagKeys[f.Name]; !ok {
				t.Errorf("--%s is hidden but not a removed flag", f.Name)
			}
			return
		}
		if f.Name != "config" && !strings.Contains(string(data), "Flag --"+f.Name) {
			t.Errorf("example: no field names its flag --%s", f.Name)
		}
		path := serveFlagTable.PathOf(f.Name)
		switch {
		case slices.Contains(noFieldFlags, f.Name):
			if path != "" {
				t.Errorf("--%s sets %s, yet sets no single field", f.Name, path)
			}
		case !slices.ContainsFunc(paths, func(p []string) bool { return strings.Join(p, ".") == path }):
			t.Errorf("--%s sets %q, which is no field of the config", f.Name, path)
		}
	})
	if len(serveFlagTable) != countFlags(fs)-len(noFieldFlags) {
		t.Errorf("serveFlagTable has %d entries for %d flags (%v have none)", len(serveFlagTable), countFlags(fs), noFieldFlags)
	}
}

// noFieldFlags are the flags that set no single field: --config, and the
// repeated flags that set a list or the entries of a map.
var noFieldFlags = []string{"config", "pod", "model", "chat-template", "chat-template-content-format"}

func countFlags(fs *pflag.FlagSet) int {
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			n++
		}
	})
	return n
}

// yamlPaths lists the yaml key paths of t's fields; a list of structs
// contributes "[]" and its item's fields.
func yamlPaths(t reflect.Type, prefix []string) [][]string {
	var out [][]string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" {
			out = append(out, yamlPaths(f.Type, prefix)...)
			continue
		}
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		path := append(slices.Clone(prefix), name)
		switch ft := f.Type; {
		case ft.Kind() == reflect.Struct:
			out = append(out, yamlPaths(ft, path)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, yamlPaths(ft.Elem(), append(path, "[]"))...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// lookup finds the key node at path in a mapping; nil if there is none.
func lookup(n *yaml.Node, path []string) *yaml.Node {
	var key *yaml.Node
	for _, name := range path {
		key = nil
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				key = n.Content[i]
			}
		}
		if key == nil {
			return nil
		}
		n = n.Content[slices.Index(n.Content, key)+1]
	}
	return key
}

func TestExamplePodsFile(t *testing.T) {
	pods, list := discovery.ReadPodsFile("../../config/pods.example.yaml", nil, "")
	if len(list) > 0 || len(pods) != 2 {
		t.Fatalf("the example pods file = %+v, %q, want 2 pods and no problem", pods, list)
	}
	if p := pods[0]; p.Name != "vllm-0" || p.IP != "10.0.0.5" || p.Port != 8000 || p.DPSize != 1 || !slices.Equal(p.LoRAs, []string{"sql-adapter"}) {
		t.Errorf("the example's first pod = %+v", p)
	}
}
