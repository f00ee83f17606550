package chat

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/internal/pyoracle"
	"github.com/kvrouter/kvrouter/tokenizer/jinja"
)

// visionTemplate is written for these tests after the chat templates of
// Qwen's vision-language models: it loops over a message's content (vLLM's
// openai content format) and writes an image, video or audio part as
// placeholder tokens that start with <|vision_start|>.
const visionTemplate = `{% for message in messages %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>{% elif content['type'] == 'audio' %}<|vision_start|><|audio_pad|><|vision_end|>{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

// stringTemplate renders content as a string (vLLM's string content
// format): vLLM then puts its model's placeholder per media item before the
// message's text.
const stringTemplate = `{% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

// mediaRequest is a random chat whose user message turn (of turns) holds
// media items of random types between text parts.
func mediaRequest(r *rand.Rand, turns, turn int) []byte {
	words := []string{"describe", " this", " picture", " of", " 42", " cats", "\n", " 日本語", " and", " then", "  "}
	text := func() string {
		var s string
		for range 1 + r.IntN(12) {
			s += words[r.IntN(len(words))]
		}
		return s
	}
	media := []map[string]any{
		{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.png"}},
		{"type": "input_audio", "input_audio": map[string]any{"data": "AAAA", "format": "wav"}},
		{"type": "video_url", "video_url": map[string]any{"url": "file:///v.mp4"}},
		{"type": "image_embeds", "image_embeds": "AAAA"},
	}
	msgs := []any{map[string]any{"role": "system", "content": "You see what users show you. " + text()}}
	for i := range turns {
		role := [2]string{"user", "assistant"}[i%2]
		if i != turn {
			msgs = append(msgs, map[string]any{"role": role, "content": text()})
			continue
		}
		var parts []any
		for range 1 + r.IntN(4) {
			if r.IntN(2) == 0 {
				parts = append(parts, map[string]any{"type": "text", "text": text()})
			} else {
				parts = append(parts, media[r.IntN(len(media))])
			}
		}
		parts = append(parts, media[r.IntN(len(media))])
		r.Shuffle(len(parts), func(a, b int) { parts[a], parts[b] = parts[b], parts[a] })
		msgs = append(msgs, map[string]any{"role": "user", "content": parts})
	}
	body, _ := json.Marshal(map[string]any{"messages": msgs})
	return body
}

// TestRenderMediaExact checks, with Qwen3's tokenizer and a vision
// template of either content format, that the ids a router hashes for a
// chat with media are exactly vLLM's ids before its first media token: the
// prompt rendered as vLLM renders it (the model's placeholder tokens for
// each item), tokenized, cut at its first placeholder token. It checks too
// that they reach at least the start of the message holding the first
// media item, and that a chat without media is known whole.
func TestRenderMediaExact(t *testing.T) {
	tok := loadModel(t, "qwen3")
	vision, err := New(nil, "", visionTemplate)
	if err != nil {
		t.Fatal(err)
	}
	str, err := New(nil, "", stringTemplate)
	if err != nil {
		t.Fatal(err)
	}
	tv, err := vision.cache.Get(visionTemplate)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := str.cache.Get(stringTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if !tv.LoopsOverContent() || ts.LoopsOverContent() {
		t.Fatal("the vision template must read as the openai content format, the other as string")
	}
	firstMedia := func(ids []uint32) int {
		for i, id := range ids {
			if id == 151652 { // <|vision_start|>
				return i
			}
		}
		return len(ids)
	}
	r := rand.New(rand.NewPCG(5, 28))
	for i := range 300 {
		turns := 1 + r.IntN(6)
		turn := r.IntN(turns) &^ 1 // a user turn
		body := mediaRequest(r, turns, turn)
		for _, c := range []*Template{vision, str} {
			req, err := ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			if !req.HasMedia() {
				t.Fatalf("%s: HasMedia() = false", body)
			}
			text, known, err := c.RenderMedia(req)
			if err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			ids, stable, err := tok.AppendEncodeStable(nil, text, false, known)
			if err != nil {
				t.Fatal(err)
			}
			// vLLM: the template's own placeholders (openai format), or the
			// model's placeholder string per item before the text (string).
			vreq := *req
			vreq.media = mediaStyle{placeholder: "<|vision_start|><|image_pad|><|vision_end|>"}
			vtext, err := c.Render(&vreq)
			if err != nil {
				t.Fatal(err)
			}
			vids, err := tok.Encode(vtext, false)
			if err != nil {
				t.Fatal(err)
			}
			f := firstMedia(vids)
			if stable > f || !slices.Equal(ids[:stable], vids[:stable]) {
				t.Fatalf("case %d %s:\n%q\nknown %d: %d stable ids %v, vLLM's first media token at %d: %v", i, body, text, known, stable, ids[:stable], f, vids[:f])
			}
			// Every message before the media one is covered: the ids reach
			// past that message's <|im_start|>.
			starts := 0
			for _, id := range vids[:f] {
				if id == 151644 {
					starts++
				}
			}
			if got := countOf(ids[:stable], 151644); got != starts {
				t.Fatalf("case %d %s: the stable ids hold %d message starts, vLLM's before its first media token %d", i, body, got, starts)
			}
		}
	}
	plain, err := ParseRequest([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if text, known, err := vision.RenderMedia(plain); err != nil || known != len(text) || plain.HasMedia() {
		t.Errorf("a chat without media: known %d of %q, %v; want all of it", known, text, err)
	}
}

// TestMediaTemplatesAgainstJinja2 renders chats with media through both
// test templates, with vLLM's media parts and with each of RenderMedia's
// two stylings, in kvrouter and in Python's jinja2 from the same context:
// the renderings must be byte-identical.
func TestMediaTemplatesAgainstJinja2(t *testing.T) {
	o := pyoracle.Get(t)
	var reqs []any
	var outs []string
	var names []string
	r := rand.New(rand.NewPCG(6, 28))
	for _, src := range []string{visionTemplate, stringTemplate} {
		c, err := New(nil, "", src)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			turns := 1 + r.IntN(6)
			body := mediaRequest(r, turns, r.IntN(turns)&^1)
			for k, style := range []mediaStyle{{placeholder: "<|vision_start|><|image_pad|><|vision_end|>"}, mediaFirst, mediaSecond} {
				req, err := ParseRequest(body)
				if err != nil {
					t.Fatal(err)
				}
				req.media = style
				in, err := c.prepare(req)
				if err != nil {
					t.Fatal(err)
				}
				out, err := in.tmpl.RenderWith(in.ctx, jinja.RenderOptions{})
				if err != nil {
					t.Fatal(err)
				}
				outs, names = append(outs, out), append(names, fmt.Sprintf("chat %d, styling %d: %s", i, k, body))
				reqs = append(reqs, map[string]any{"template": src, "context": contextJSON(t, in.ctx)})
			}
		}
	}
	res, err := o.Query(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if d := pyoracle.Check(outs[i], nil, res[i]); d != "" {
			t.Errorf("%s:\n%s", names[i], d)
		}
	}
}

func countOf(ids []uint32, id uint32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// FuzzContentParts feeds random content to the chat conversion: it never
// panics, a media part of every type vLLM reads is accepted, and a request
// the conversion accepts renders through RenderMedia with known within the
// text.
func FuzzContentParts(f *testing.F) {
	for _, s := range []string{
		`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]`,
		`[{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}},"b"]`,
		`[{"type":"video_url"},{"type":"refusal","refusal":null},{"type":"input_text","text":"c"}]`,
		`[{"type":"image_embeds","image_embeds":1},{"type":"hologram"}]`,
		`"plain"`, `null`, `[1]`, `[{"type":7}]`,
	} {
		f.Add(s, true)
	}
	vision, err := New(nil, "", visionTemplate)
	if err != nil {
		f.Fatal(err)
	}
	str, err := New(nil, "", stringTemplate)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content string, openai bool) {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"before"},{"role":"user","content":%s}]}`, content)
		req, err := ParseRequest([]byte(body))
		if err != nil {
			return
		}
		c := str
		if openai {
			c = vision
		}
		text, known, err := c.RenderMedia(req)
		if err != nil {
			return
		}
		if known < 0 || known > len(text) || !req.HasMedia() && known != len(text) {
			t.Fatalf("%s: known %d of %d bytes (media %v)", body, known, len(text), req.HasMedia())
		}
	})
}
