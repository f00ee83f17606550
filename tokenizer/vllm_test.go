package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// TestVLLMCapture encodes the prompt of a real vLLM KV event with Qwen3's
// tokenizer and expects the token ids vLLM hashed (the first 400 of 402:
// the last partial block is not hashed).
func TestVLLMCapture(t *testing.T) {
	path := filepath.Join(oracle.Root(t), "testdata", "vllm", "kv_event_base.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var capture struct {
		Prompt   string   `json:"prompt"`
		TokenIDs []uint32 `json:"token_ids"`
	}
	if err := json.Unmarshal(data, &capture); err != nil {
		t.Fatal(err)
	}
	got, err := loadModel(t, "qwen3").Encode(capture.Prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(capture.TokenIDs)+2 {
		t.Errorf("Encode(prompt) gave %d ids, want %d", len(got), len(capture.TokenIDs)+2)
	}
	if d := oracle.Diff(got[:min(len(got), len(capture.TokenIDs))], capture.TokenIDs); d != "" {
		t.Errorf("Encode(prompt): %s", d)
	}
}
