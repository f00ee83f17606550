package discovery

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	c := DefaultConfig()
	c.Kubeconfig, c.Selector, c.EventPort, c.Namespaces, c.Resync = "", "a in (", 70000, []string{"x", "x", ""}, -1
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want every problem")
	}
	for _, want := range []string{"kubeconfig", "selector", "event port", `namespace "x"`, `namespace ""`, "resync"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}
