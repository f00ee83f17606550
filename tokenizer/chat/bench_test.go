package chat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/oracle"
)

// qwen3Request is a 10-message conversation (system, 4 user/assistant
// pairs with thinking, a last question).
func qwen3Request(b *testing.B) *Request {
	msgs := []string{`{"role": "system", "content": "You are a helpful assistant."}`}
	for i := range 4 {
		msgs = append(msgs,
			fmt.Sprintf(`{"role": "user", "content": "Question %d: what is the capital of country number %d?"}`, i, i),
			fmt.Sprintf(`{"role": "assistant", "content": "<think>\nLet me think about %d.\n</think>\n\nThe answer is city %d."}`, i, i))
	}
	msgs = append(msgs, `{"role": "user", "content": "And the last one?"}`)
	req, err := ParseRequest([]byte(`{"messages": [` + strings.Join(msgs, ",") + `]}`))
	if err != nil {
		b.Fatal(err)
	}
	return req
}

// BenchmarkChatRenderQwen3 renders a 10-message conversation with qwen3's
// template (compiled once, cached). Target: ≤ 0.3 ms.
//
// go test -run '^$' -bench Chat -benchmem -count 3 ./tokenizer/chat/ on 2 cores
// shared with other jobs (load ≈ 7.5, so the spread is noise), 2026-11-21:
//
//	BenchmarkChatRenderQwen3-2   66990-74810 ns/op   22794 B/op  476 allocs/op
//	BenchmarkChatEncodeQwen3-2   70933-121492 ns/op  24586 B/op  478 allocs/op
//
// After undefined attributes stopped formatting their message eagerly and
// small dicts find string keys by scanning (load ≈ 4, old and new binaries
// run alternately three times, 2026-11-21):
//
//	BenchmarkChatRenderQwen3-2   old 62632-97992 ns/op  22792 B/op  476 allocs/op
//	                             new 53151-55900 ns/op  22373 B/op  452 allocs/op
func BenchmarkChatRenderQwen3(b *testing.B) {
	benchRender(b, loadQwen3Chat(b), qwen3Request(b))
}

// chat8kRequest is kvrouter-load's 8k-token chat request: 10 messages of
// about 4,000 bytes each, alternating user and assistant.
func chat8kRequest(b testing.TB) *Request {
	words := strings.Fields("routing every request to the pod that already caches its prefix saves the prefill and lowers the time to first token")
	var msgs []string
	for i := range 10 {
		var sb strings.Builder
		for j := 0; sb.Len() < 4000; j++ {
			sb.WriteString(words[(i+j*7)%len(words)] + " ")
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, [2]string{"user", "assistant"}[i%2], sb.String()))
	}
	req, err := ParseRequest([]byte(`{"model":"qwen3","messages":[` + strings.Join(msgs, ",") + `]}`))
	if err != nil {
		b.Fatal(err)
	}
	return req
}

// BenchmarkChatRender8kQwen3 renders chat8kRequest (40 KB of content)
// with qwen3's template: the chat render of every 8k-token chat decision.
//
// Before and after + chains were joined once and printed piece by piece,
// the output was sized from the request, loop scopes were reused, small
// dicts stopped hashing and string methods stopped binding (old and new
// binaries run alternately three times, load ≈ 5, 2026-11-22; time is
// noise at this load, bytes and allocations are exact):
//
//	BenchmarkChatRender8kQwen3-2  old 262613-394124 ns/op  221020 B/op  324 allocs/op
//	                              new  92397-119323 ns/op   55385 B/op  113 allocs/op
//	BenchmarkChatRenderQwen3-2    old  95319-132561 ns/op   22376 B/op  452 allocs/op
//	                              new  70367-92198 ns/op    11241 B/op  208 allocs/op
//	BenchmarkChatRenderGPTOSS-2   old 383304-455747 ns/op   65258 B/op 1121 allocs/op
//	                              new 309045-366927 ns/op   46573 B/op  584 allocs/op
//
// 48 KB of the 8k render's 55 KB is its 40 KB output, allocated once.
func BenchmarkChatRender8kQwen3(b *testing.B) {
	benchRender(b, loadQwen3Chat(b), chat8kRequest(b))
}

// BenchmarkChatEncodeQwen3 is BenchmarkChatRenderQwen3 plus encoding the
// prompt (the token ids kvrouter hashes).
func BenchmarkChatEncodeQwen3(b *testing.B) {
	c := loadQwen3Chat(b)
	tok := loadModel(b, "qwen3")
	req := qwen3Request(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Encode(tok, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatRenderGPTOSS renders the same 10 messages with gpt-oss's
// harmony template and the two tools of the "tool schema typescript"
// conversation, whose schemas the template turns into TypeScript through
// recursive macros.
//
// The same runs as above (old: before those two changes):
//
//	BenchmarkChatRenderGPTOSS-2  old 233037-343244 ns/op  69100 B/op  1367 allocs/op
//	                             new 183168-260547 ns/op  65237 B/op  1121 allocs/op
func BenchmarkChatRenderGPTOSS(b *testing.B) {
	tmpl, err := os.ReadFile(filepath.Join("testdata", "gpt-oss.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	c, err := Load(oracle.ModelDir(b, "gptoss"), string(tmpl))
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		b.Fatal(err)
	}
	var convs []conversationCase
	if err := json.Unmarshal(data, &convs); err != nil {
		b.Fatal(err)
	}
	req := qwen3Request(b)
	for _, cv := range convs {
		if cv.Name == "tool schema typescript" {
			withTools, err := ParseRequest(cv.Request)
			if err != nil {
				b.Fatal(err)
			}
			req.Tools = withTools.Tools
		}
	}
	if req.Tools == nil {
		b.Fatal(`conversation "tool schema typescript" not found`)
	}
	benchRender(b, c, req)
}

// loadQwen3Chat is qwen3's chat template from its model directory.
func loadQwen3Chat(b *testing.B) *Template {
	c, err := Load(oracle.ModelDir(b, "qwen3"), "")
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchRender renders req with c once per iteration.
func benchRender(b *testing.B, c *Template, req *Request) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Render(req); err != nil {
			b.Fatal(err)
		}
	}
}
