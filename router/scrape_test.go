package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-0.6B"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-0.6B"} 0.5
vllm:num_requests_waiting_by_reason{reason="capacity"} 99
vllm:prompt_tokens_total{model_name="x"} 1.2e+06
`

func TestParseVLLMMetrics(t *testing.T) {
	tests := []struct {
		in   string
		want Queue
	}{
		{vllmMetrics, Queue{Waiting: 7, Running: 5, KVUsage: 0.5}},
		{"vllm:gpu_cache_usage_perc 0.75\n", Queue{Waiting: -1, Running: -1, KVUsage: 0.75}},
		{"", Queue{Waiting: -1, Running: -1, KVUsage: -1}},
		{"vllm:num_requests_waiting{} NaN\nvllm:num_requests_running garbage\n", Queue{Waiting: -1, Running: -1, KVUsage: -1}},
	}
	for _, tt := range tests {
		if got := ParseVLLMMetrics(strings.NewReader(tt.in)); got != tt.want {
			t.Errorf("ParseVLLMMetrics(%.40q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestScraperFeedsLoad(t *testing.T) {
	tr := newTestRouter(t)
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, vllmMetrics)
	}))
	defer pod.Close()
	tr.fleet.Upsert(Pod{Name: "a", Address: strings.TrimPrefix(pod.URL, "http://"), Model: "llama", Ready: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewScraper(tr.fleet, nil, time.Millisecond, slog.New(slog.DiscardHandler)).Run(ctx) }()
	l := tr.fleet.Load("a")
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a performance bound
	for l.Waiting.Load() != 7 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a real HTTP scrape
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l.Waiting.Load() != 7 || l.Running.Load() != 5 || l.KVUsagePermille.Load() != 500 {
		t.Fatalf("load after scraping = waiting %d running %d kv %d‰, want 7, 5, 500", l.Waiting.Load(), l.Running.Load(), l.KVUsagePermille.Load())
	}
	// A pod that reports a queue costs more.
	rep, err := tr.Score(Request{Path: "/v1/completions", Body: []byte(completion("llama", prompt, ""))})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Pods {
		if s.Pod == "a" && s.Queue < 7*DefaultConfig().WaitingSecondsPerRequest {
			t.Fatalf("pod a queue cost = %v, want at least 7 waiting requests' worth", s.Queue)
		}
	}
}
