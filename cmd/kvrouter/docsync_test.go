package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/router"
)

// docPages are the manual's pages, relative to the repository root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(pages, "../../README.md")
}

// TestConfigKeysExplainedOnce: each config key is explained in exactly one
// place. A routing key by one settings-table row of the manual, in
// docs/routing.md; every other key by its comment in the example config
// (TestExampleDocumentsEveryField), and by no table row of the manual.
func TestConfigKeysExplainedOnce(t *testing.T) {
	rows := map[string][]string{}
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\|")
	for _, page := range docPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range row.FindAllStringSubmatch(string(text), -1) {
			rows[m[1]] = append(rows[m[1]], filepath.Base(page))
		}
	}
	for f := range reflect.TypeFor[router.Config]().Fields() {
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "-" || key == "" {
			continue
		}
		if got := rows[key]; len(got) != 1 || got[0] != "routing.md" {
			t.Errorf("routing.%s is explained by table rows in %v, want one row, in routing.md", key, got)
		}
	}
	for _, path := range yamlPaths(reflect.TypeFor[config](), nil) {
		if key := strings.Join(path, "."); len(rows[key]) > 0 {
			t.Errorf("%s is explained by table rows in %v besides the example config", key, rows[key])
		}
	}
}

// TestDocLinksResolve: every relative link of the manual names a file
// that exists and, into a page, a heading that page has.
func TestDocLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]+)?\)`)
	for _, page := range docPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), target)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s: %v", filepath.Base(page), m[0], err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !hasAnchor(t, path, anchor) {
				t.Errorf("%s links %s: %s has no such heading", filepath.Base(page), m[0], filepath.Base(path))
			}
		}
	}
}

// hasAnchor reports whether the Markdown page at path has a heading whose
// anchor, as the code host renders it, is anchor.
func hasAnchor(t *testing.T, path, anchor string) bool {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-") == anchor {
			return true
		}
	}
	return false
}
