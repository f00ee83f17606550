package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

const shortSystem = "You are a travel assistant."

// conversation is a scripted user: each turn resends the whole history, as
// chat clients do, so later turns share a long prefix with the earlier ones.
type conversation struct {
	name, system string
	turns        []string
	// chat sends the turns as messages to /v1/chat/completions instead of
	// as a prompt to /v1/completions.
	chat bool
	// streamLast asks for the last turn's reply with "stream": true.
	streamLast bool
}

// conversations are the demo's scripted users.
var conversations = []conversation{
	{
		name:   "travel",
		system: shortSystem + " Answer in three sentences, name one museum and one place to eat, and warn about crowds in summer. ",
		turns:  []string{"Plan a day in Lisbon.", "And the next day in Sintra?", "Where should I stay?"},
	},
	{
		name:   "cooking",
		system: "You are a patient cooking teacher. Explain each step, give quantities in grams, and suggest one variation for vegetarians. ",
		turns:  []string{"How do I make risotto?", "Can I use brown rice?", "What wine goes with it?"},
	},
	{
		name:   "code",
		system: "You are a senior Go reviewer. Point out races, leaks and unclear names, and propose a smaller diff whenever possible. ",
		turns:  []string{"Review: go func() { for { work() } }()", "Should it take a context?", "How do I test it without sleeps?"},
	},
	{
		name:   "support",
		system: "You are a support agent for a bicycle shop. Ask for the frame size, suggest one part and its price, and offer a repair slot. ",
		turns:  []string{"My chain keeps slipping.", "It is a 54 cm road bike.", "Can you fit it on Saturday?"},
		chat:   true, streamLast: true,
	},
}

// exchange is one past turn: what the user asked and what came back.
type exchange struct{ user, assistant string }

// workload sends the conversations' turns interleaved through the proxy and
// prints where each went and why.
func workload(ctx context.Context, base string, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tconversation\tturn\tapi\tpod\tcached/total blocks\treason\tlatency")
	history := make([][]exchange, len(conversations))
	n := 0
	for turn := range 3 {
		for i, c := range conversations {
			stream := c.streamLast && turn == len(c.turns)-1
			q := c.query(history[i], c.turns[turn], stream)
			start := time.Now()
			h, text, err := ask(ctx, base, q)
			if err != nil {
				return fmt.Errorf("%s turn %d: %w", c.name, turn+1, err)
			}
			n++
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", n, c.name, turn+1, q.api(), h.Get("X-Kvrouter-Pod"),
				h.Get("X-Kvrouter-Cached-Blocks"), h.Get("X-Kvrouter-Reason"), time.Since(start).Round(time.Millisecond))
			history[i] = append(history[i], exchange{c.turns[turn], text})
		}
	}
	return tw.Flush()
}

// query returns the request of the conversation's next turn: the system
// text repeated into a long shared prefix, the past exchanges, then user.
func (c conversation) query(past []exchange, user string, stream bool) query {
	system := strings.Repeat(c.system, 12)
	if c.chat {
		msgs := []message{{"system", system}}
		for _, e := range past {
			msgs = append(msgs, message{"user", e.user}, message{"assistant", e.assistant})
		}
		return query{messages: append(msgs, message{"user", user}), stream: stream}
	}
	var prompt strings.Builder
	prompt.WriteString(system)
	for _, e := range past {
		fmt.Fprintf(&prompt, "User: %s\nAssistant:%s\n", e.user, e.assistant)
	}
	fmt.Fprintf(&prompt, "User: %s\nAssistant:", user)
	return query{prompt: prompt.String(), stream: stream}
}
