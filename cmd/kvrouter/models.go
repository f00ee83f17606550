package main

import (
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/internal/conf"
)

// given reports whether the config file or a flag on the command line set
// the field at path.
func (c config) given(path string) bool {
	if _, ok := c.positions[path]; ok {
		return true
	}
	return slices.ContainsFunc(c.flagsSet, func(flag string) bool { return serveFlagTable.PathOf(flag) == path })
}

// applyEnv reads the hub's environment variables into the tokenizers
// section (models.Settings.ApplyEnv), the hub token, and $KUBECONFIG.
func (c *config) applyEnv(getenv func(string) string) {
	c.hubToken = c.Tokenizers.ApplyEnv(getenv, func(key string) bool { return c.given("tokenizers." + key) })
	c.kubeconfigEnv = getenv("KUBECONFIG")
}

// tokenizerProblems adds the tokenizers section's problems, each naming the
// flag that set the value when --chat-template or
// --chat-template-content-format did (the flag and the model).
func (c config) tokenizerProblems(p *conf.Problems, err error) {
	for _, e := range conf.LeafErrors(err) {
		problem := "tokenizers." + e.Error()
		for _, f := range []struct {
			flag, field string
			values      []string
		}{{"--chat-template", "chat_template", c.templateFlags}, {"--chat-template-content-format", "chat_template_content_format", c.formatFlags}} {
			for _, v := range f.values {
				name, _, _ := strings.Cut(v, "=")
				if rest, ok := strings.CutPrefix(problem, "tokenizers.models."+name+"."+f.field+":"); ok {
					problem = f.flag + " " + name + ":" + rest
				}
			}
		}
		p.Add("%s", problem)
	}
}
