package chat

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

func TestRegistryFor(t *testing.T) {
	dir := oracle.ModelDir(t, "qwen3")
	cfg := tokenizer.DefaultConfig()
	cfg.Models = map[string]string{"qwen3": dir, "plain": dir}
	cfg.Aliases = map[string]string{"my-lora": "qwen3"}
	reg, err := tokenizer.NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	chats := NewRegistry(reg, map[string]Options{"plain": {Template: "{% for m in messages %}{{ m.content }}{% endfor %}"}})
	req, err := ParseRequest([]byte(`{"messages": [{"role": "user", "content": "Hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chats.For("my-lora")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := reg.For("my-lora")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Encode(tok, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198} // from `kvrouter render --tokens`, equal to the oracle chain
	if !slices.Equal(got, want) {
		t.Errorf("Encode(my-lora) = %v, want %v", got, want)
	}
	a, _ := chats.For("qwen3")
	b, _ := chats.For("my-lora")
	if a != b {
		t.Errorf("For(qwen3) and For(my-lora) differ, want one cached Chat")
	}
	p, err := chats.For("plain")
	if err != nil || p.Template() != "{% for m in messages %}{{ m.content }}{% endfor %}" {
		t.Errorf("For(plain) = %v, %v, want the override template", p, err)
	}
	if _, err := chats.For("nope"); !errors.Is(err, tokenizer.ErrUnknownModel) {
		t.Errorf("For(nope) = %v, want tokenizer.ErrUnknownModel", err)
	}
}
