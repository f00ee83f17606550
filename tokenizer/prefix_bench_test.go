package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fixture/sourcetext"
)

// benchChat is a rendered Qwen3 chat of turns messages of about 250
// tokens, tagged with id from its first bytes on, ending with the
// generation prompt.
func benchChat(id, turns int) string {
	const per = 250
	words := strings.Fields("the router reads each request and sends it to the pod that already holds the longest prefix of its prompt in cache while weighing load 12 345 6789")
	var b strings.Builder
	fmt.Fprintf(&b, "<|im_start|>system\nconversation %d: you are helpful.<|im_end|>\n", id)
	for t := range turns {
		fmt.Fprintf(&b, "<|im_start|>%s\n", [2]string{"user", "assistant"}[t%2])
		for i, n := 0, b.Len(); b.Len()-n < per*5; i++ {
			b.WriteString(words[(i*7+t*3+id)%len(words)])
			b.WriteByte(' ')
		}
		b.WriteString("<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

// codeChat is a Qwen3 chat of at least n bytes whose messages are
// kvrouter's own source files (see sourcetext), a coding agent's prompt.
func codeChat(tb testing.TB, n int) string {
	files, err := sourcetext.Files("..", n)
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("<|im_start|>system\nYou are a coding agent.<|im_end|>\n")
	for i, f := range files {
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", [2]string{"user", "assistant"}[i%2], f)
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

// BenchmarkPrefixEncode encodes the next turn of a Qwen3 chat of about
// 100k and 8k tokens (two messages, about 500 tokens, more than the
// previous turn): "full", Encode; "warm", through a PrefixCache that has
// just encoded the previous turn; "cold", through a PrefixCache that has
// never seen the conversation. Each iteration is a new conversation; only
// the measured encoding is timed.
func BenchmarkPrefixEncode(b *testing.B) {
	tok := loadModel(b, "qwen3")
	for _, bc := range []struct {
		name  string
		turns int
	}{{"tokens=100k", 311}, {"tokens=8k", 25}} {
		for _, mode := range []string{"full", "cold", "warm"} {
			b.Run(bc.name+"/"+mode, func(b *testing.B) {
				c := NewPrefixCache(tok, DefaultPrefixCacheBytes)
				var dst []uint32
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					b.StopTimer()
					// The previous turn lacks the last answer and question.
					next := benchChat(i, bc.turns)
					prev := benchChat(i, bc.turns-2)
					if mode == "warm" {
						if _, _, err := c.AppendEncode(nil, prev, false); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					var err error
					if mode == "full" {
						dst, err = tok.AppendEncode(dst[:0], next, false)
					} else {
						dst, _, err = c.AppendEncode(dst[:0], next, false)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(dst)), "tokens")
			})
		}
	}
}
