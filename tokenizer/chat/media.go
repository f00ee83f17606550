package chat

import "github.com/kvrouter/kvrouter/tokenizer/jinja"

// mediaStyle is how a rendering shows a message's media items (image,
// audio and video content parts). vLLM hands the template, in the string
// content format, one placeholder string per item before the message's
// text (its model's own, such as <|vision_start|><|image_pad|><|vision_end|>
// or <image>), and in the openai format a part {"type": modality}; its
// processor then expands each into tokens that depend on the media itself,
// and the block hashes of the blocks holding them carry the media's hash.
// A router can reproduce neither, so RenderMedia renders a request twice,
// its media shown two different ways, and keeps only what precedes the
// first difference.
type mediaStyle struct {
	placeholder string // the string format's placeholder per item
	asText      string // openai format: a text part of this text instead of the media part; "": the media part
}

// The two renderings RenderMedia compares: the first is vLLM's but for the
// string format's placeholder text; the second differs from it at the
// first media item (or earlier, where the template already depends on it).
var (
	mediaFirst  = mediaStyle{placeholder: "\ue000"}
	mediaSecond = mediaStyle{placeholder: "\ue001", asText: "\ue001"}
)

// HasMedia reports whether a message of req has a media content part
// (image_url, input_audio, video_url and the other media types vLLM
// reads), as found once when the request was read (ParseRequest,
// Fields.Request).
func (req *Request) HasMedia() bool { return req.hasMedia }

// hasMediaPart reports whether a message of msgs has a media content part.
func hasMediaPart(msgs []jinja.Value) bool {
	for _, m := range msgs {
		d, ok := m.(*jinja.Dict)
		if !ok {
			continue
		}
		parts, ok := get(d, "content").(*jinja.List)
		if !ok {
			continue
		}
		for _, p := range parts.Items {
			if pd, ok := p.(*jinja.Dict); ok {
				if typ, ok := get(pd, "type").(string); ok && mediaParts[typ] != "" {
					return true
				}
			}
		}
	}
	return false
}

// RenderMedia renders req and returns, with the text, how much of it is
// the prompt vLLM renders whatever the media: the whole text for a request
// without media; for one with media, the bytes before the first place
// where the rendering depends on a media item. Encoded with
// tokenizer.AppendEncodeStable up to that length, the ids are those vLLM
// computes before its first media token, and the full blocks among them
// hash as the pod's do (they carry no media hash).
func (c *Template) RenderMedia(req *Request) (text string, known int, err error) {
	if !req.HasMedia() {
		text, err = c.Render(req)
		return text, len(text), err
	}
	first, second := *req, *req
	first.media, second.media = mediaFirst, mediaSecond
	if text, err = c.Render(&first); err != nil {
		return "", 0, err
	}
	other, err := c.Render(&second)
	if err != nil {
		return "", 0, err
	}
	for known < len(text) && known < len(other) && text[known] == other[known] {
		known++
	}
	return text, known, nil
}
