package main

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestReadStream(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{
			"chat deltas",
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\" b\"},\"finish_reason\":\"length\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n",
			" a b", false,
		},
		{"completion text", "data: {\"choices\":[{\"text\":\" a\"}]}\n\n: comment\n\ndata: [DONE]\n\n", " a", false},
		{"no [DONE]", "data: {\"choices\":[{\"text\":\" a\"}]}\n\n", "", true},
		{"bad chunk", "data: {\n\ndata: [DONE]\n\n", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readStream(strings.NewReader(tt.in))
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("readStream(%q) = %q, %v, want %q, error %t", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestQueryRequest(t *testing.T) {
	tests := []struct {
		name     string
		q        query
		wantPath string
		wantKeys []string
	}{
		{"completion", query{prompt: "p"}, "/v1/completions", []string{"max_tokens", "model", "prompt"}},
		{"chat", query{messages: []message{{"user", "u"}}}, "/v1/chat/completions", []string{"max_tokens", "messages", "model"}},
		{"streamed chat", query{messages: []message{{"user", "u"}}, stream: true}, "/v1/chat/completions", []string{"max_tokens", "messages", "model", "stream", "stream_options"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, body := tt.q.request()
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(body, &fields); err != nil {
				t.Fatalf("request() body = %s: %v", body, err)
			}
			keys := slices.Sorted(maps.Keys(fields))
			if path != tt.wantPath || strings.Join(keys, ",") != strings.Join(tt.wantKeys, ",") {
				t.Errorf("%+v.request() = %s %s, want %s with %v", tt.q, path, body, tt.wantPath, tt.wantKeys)
			}
		})
	}
}

// TestExamples checks that the printed curl commands carry valid JSON and
// include a chat and a streamed chat.
func TestExamples(t *testing.T) {
	out := examples("127.0.0.1:8080", "127.0.0.1:9090")
	curls := regexp.MustCompile(`curl (-N )?-s -D- http://127\.0\.0\.1:8080(/v1/\S+) [^\n]*\n\s*-d '([^']*)'`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, c := range curls {
		var body struct {
			Stream   bool              `json:"stream"`
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal([]byte(c[3]), &body); err != nil {
			t.Errorf("examples() body %s: %v", c[3], err)
		}
		if body.Stream != (c[1] != "") {
			t.Errorf("examples() curl %q: stream %t, want -N exactly when streaming", c[0], body.Stream)
		}
		got = append(got, c[2]+map[bool]string{true: " stream"}[body.Stream])
	}
	want := "/v1/completions,/v1/chat/completions,/v1/chat/completions stream"
	if strings.Join(got, ",") != want {
		t.Errorf("examples() curls = %v, want %s in\n%s", got, want, out)
	}
}
