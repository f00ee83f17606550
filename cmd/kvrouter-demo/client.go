package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// message is one chat message.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// query is one request of the workload: a completion's prompt or a chat's
// messages, answered whole or streamed.
type query struct {
	prompt   string
	messages []message // non-nil: a chat
	stream   bool
}

// api names the endpoint and mode for the printed table.
func (q query) api() string {
	api := "completion"
	if q.messages != nil {
		api = "chat"
	}
	if q.stream {
		api += " stream"
	}
	return api
}

// path and body are the query's OpenAI request.
func (q query) request() (path string, body []byte) {
	fields := map[string]any{"model": "qwen3", "max_tokens": 12}
	path = "/v1/completions"
	if q.messages != nil {
		path, fields["messages"] = "/v1/chat/completions", q.messages
	} else {
		fields["prompt"] = q.prompt
	}
	if q.stream {
		fields["stream"], fields["stream_options"] = true, map[string]bool{"include_usage": true}
	}
	body, _ = json.Marshal(fields) // strings, bools and numbers always encode
	return path, body
}

// ask sends one query through the proxy and returns the response headers
// and the reply's text, read whole or assembled from the streamed chunks.
func ask(ctx context.Context, base string, q query) (http.Header, string, error) {
	path, body := q.request()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, "", fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("POST %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, "", fmt.Errorf("POST %s: %s: %s", path, resp.Status, msg)
	}
	var text string
	if q.stream {
		text, err = readStream(resp.Body)
	} else {
		text, err = readAnswer(resp.Body)
	}
	if err != nil {
		return nil, "", fmt.Errorf("POST %s: %w", path, err)
	}
	return resp.Header, text, nil
}

// choices is the part of an answer or a streamed chunk the demo reads.
type choices struct {
	Choices []struct {
		Text    string  `json:"text"`
		Message message `json:"message"`
		Delta   message `json:"delta"`
	} `json:"choices"`
}

// readAnswer returns the text of a whole completion or chat answer.
func readAnswer(r io.Reader) (string, error) {
	var a choices
	if err := json.NewDecoder(r).Decode(&a); err != nil {
		return "", fmt.Errorf("decode the answer: %w", err)
	}
	if len(a.Choices) == 0 {
		return "", errors.New("an answer without choices")
	}
	return a.Choices[0].Text + a.Choices[0].Message.Content, nil
}

// readStream reads Server-Sent Events up to data: [DONE] and returns the
// text their chunks carry (completion text or chat deltas).
func readStream(r io.Reader) (string, error) {
	var text strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // blank separators, comments
		}
		if data == "[DONE]" {
			return text.String(), nil
		}
		var c choices
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return "", fmt.Errorf("decode a streamed chunk %q: %w", data, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text + ch.Delta.Content)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read the stream: %w", err)
	}
	return "", errors.New("the stream ended without data: [DONE]")
}
