package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

const shortSystem = "You are a travel assistant."

// conversations are the scripted users: each turn resends the whole
// history, as chat clients do, so later turns share a long prefix with the
// earlier ones.
var conversations = []struct {
	name   string
	system string
	turns  []string
}{
	{
		"travel", shortSystem + " Answer in three sentences, name one museum and one place to eat, and warn about crowds in summer. ",
		[]string{"Plan a day in Lisbon.", "And the next day in Sintra?", "Where should I stay?"},
	},
	{
		"cooking", "You are a patient cooking teacher. Explain each step, give quantities in grams, and suggest one variation for vegetarians. ",
		[]string{"How do I make risotto?", "Can I use brown rice?", "What wine goes with it?"},
	},
	{
		"code", "You are a senior Go reviewer. Point out races, leaks and unclear names, and propose a smaller diff whenever possible. ",
		[]string{"Review: go func() { for { work() } }()", "Should it take a context?", "How do I test it without sleeps?"},
	},
}

// workload sends the conversations' turns interleaved through the proxy and
// prints where each went and why.
func workload(ctx context.Context, base string, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tconversation\tturn\tpod\tcached/total blocks\treason\tlatency")
	history := make([]string, len(conversations))
	n := 0
	for turn := range 3 {
		for i, c := range conversations {
			history[i] += fmt.Sprintf("User: %s\nAssistant:", c.turns[turn])
			prompt := strings.Repeat(c.system, 12) + history[i]
			start := time.Now()
			h, text, err := complete(ctx, base, prompt)
			if err != nil {
				return err
			}
			n++
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", n, c.name, turn+1, h.Get("X-Kvrouter-Pod"),
				h.Get("X-Kvrouter-Cached-Blocks"), h.Get("X-Kvrouter-Reason"), time.Since(start).Round(time.Millisecond))
			history[i] += text + "\n"
		}
	}
	return tw.Flush()
}

// complete sends one completion and returns the response headers and text.
func complete(ctx context.Context, base, prompt string) (http.Header, string, error) {
	body, _ := json.Marshal(map[string]any{"model": "qwen3", "prompt": prompt, "max_tokens": 12})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var r struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, "", fmt.Errorf("request failed: %s: %s", resp.Status, msg)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) == 0 {
		return nil, "", fmt.Errorf("unexpected reply (%d choices): %w", len(r.Choices), err)
	}
	return resp.Header, r.Choices[0].Text, nil
}
