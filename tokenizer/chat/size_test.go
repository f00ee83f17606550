package chat

import "testing"

// TestRenderSize checks the output size renderSize predicts for the
// renders of every template under test: an 8k-token chat fits (its output
// is allocated once) without much to spare, and the conversations miss by
// at most their template's own text.
func TestRenderSize(t *testing.T) {
	convs := loadConversations(t)
	for _, ct := range chatTemplates {
		t.Run(ct.name, func(t *testing.T) {
			c, _ := loadTemplateChat(t, ct)
			req := chat8kRequest(t)
			in, err := c.prepare(req)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Render(req)
			if err != nil {
				t.Fatal(err)
			}
			if h := renderSize(in.ctx); h < len(out) || h > 2*len(out)+2048 {
				t.Errorf("renderSize(8k chat) = %d, want %d to %d", h, len(out), 2*len(out)+2048)
			}
			for _, cv := range convs {
				req, err := ParseRequest(cv.Request)
				if err != nil {
					continue // the request errors of TestChatTemplatesAgainstJinja2
				}
				in, err := c.prepare(req)
				if err != nil {
					continue
				}
				out, err := c.Render(req)
				if err != nil {
					continue
				}
				if h := renderSize(in.ctx); h+2048 < len(out) {
					t.Errorf("%s: renderSize = %d, want %d at least", cv.Name, h, len(out)-2048)
				}
			}
		})
	}
}
