package test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs fails when a Go package in the module has no package doc
// comment or more than one: exactly one file per package says what it is for.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	dirs := map[string][]string{} // dir → its non-test Go files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 9 {
		t.Fatalf("found %d packages under %s, want at least the 9 of the layout", len(dirs), root)
	}
	fset := token.NewFileSet()
	for dir, files := range dirs {
		var withDoc []string
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil && strings.TrimSpace(af.Doc.Text()) != "" {
				withDoc = append(withDoc, filepath.Base(f))
			}
		}
		rel, _ := filepath.Rel(root, dir)
		if len(withDoc) != 1 {
			t.Errorf("package %s has %d package doc comments (%v), want exactly 1", rel, len(withDoc), withDoc)
		}
	}
}

// moduleRoot walks up from the test's directory to the go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}
