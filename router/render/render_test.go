package render

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kvindex/blockhash"
)

// generateRequest is a render answer in vLLM's shape: GenerateRequest
// with its MultiModalFeatures (vllm/entrypoints/scale_out/
// token_in_token_out/protocol.py at vLLM 5dfbdc4d), dumped with every
// field, nulls included, as model_dump() writes it.
func generateRequest(ids []uint32, features any) map[string]any {
	return map[string]any{
		"request_id": "chatcmpl-9f1c", "token_ids": ids, "assistant_tokens_mask": nil, "token_offsets": nil,
		"features":        features,
		"sampling_params": map[string]any{"n": 1, "temperature": 1.0, "top_p": 1.0, "max_tokens": 89},
		"model":           "m", "stream": false, "stream_options": nil, "cache_salt": nil, "priority": 0, "kv_transfer_params": nil,
	}
}

// server is a render endpoint whose next answers a test sets.
type server struct {
	*httptest.Server
	calls  atomic.Int64
	answer func(w http.ResponseWriter, r *http.Request)
}

func newServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *server {
	s := &server{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		s.answer(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func jsonAnswer(v any) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/render") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}

func TestRenderAnswers(t *testing.T) {
	mm := map[string]any{
		"mm_hashes":       map[string]any{"image": []string{"aa", "bb"}, "audio": []string{"cc"}},
		"mm_placeholders": map[string]any{"image": []any{map[string]int{"offset": 2, "length": 3}, map[string]int{"offset": 9, "length": 1}}, "audio": []any{map[string]int{"offset": 5, "length": 2}}},
		"kwargs_data":     map[string]any{"image": []any{"AAAA", nil}, "audio": []any{"BBBB"}},
	}
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 4294967295}
	for _, tt := range []struct {
		name   string
		answer any
		path   string
		want   Result
	}{
		{"chat", generateRequest(ids, nil), "/v1/chat/completions", Result{IDs: ids}},
		{"completion list", []any{generateRequest(ids[:3], nil), generateRequest(ids, nil)}, "/v1/completions", Result{IDs: ids[:3]}},
		{"multimodal", generateRequest(ids, mm), "/v1/chat/completions", Result{IDs: ids, MM: []blockhash.MMItem{{Hash: "aa", Offset: 2, Length: 3}, {Hash: "cc", Offset: 5, Length: 2}, {Hash: "bb", Offset: 9, Length: 1}}}},
	} {
		s := newServer(t, jsonAnswer(tt.answer))
		c := New(DefaultConfig(), nil)
		got, items, err := c.Render(context.Background(), []uint32{77}, []string{s.URL}, tt.path, []byte(`{}`), false)
		if err != nil || !slices.Equal(got, append([]uint32{77}, tt.want.IDs...)) || !slices.Equal(items, tt.want.MM) {
			t.Errorf("%s: Render = %v %v, %v; want %v %v", tt.name, got, items, err, tt.want.IDs, tt.want.MM)
		}
	}
}

// TestRenderFaults: every way an endpoint can fail gives an error saying
// which, never a result; endpoint failures move on to the next endpoint
// and open the breaker; the body's own refusal does neither.
func TestRenderFaults(t *testing.T) {
	good := jsonAnswer(generateRequest([]uint32{5, 6}, nil))
	for _, tt := range []struct {
		name    string
		answer  func(http.ResponseWriter, *http.Request)
		outcome string
	}{
		{"400", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}`))
		}, OutcomeRefused},
		{"500", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}`))
		}, OutcomeError},
		{"404 route", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
		}, OutcomeNotServed},
		{"malformed", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"token_ids":[1,"x"]}`)) }, OutcomeError},
		{"truncated", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"token_ids":[1,2`)) }, OutcomeError},
		{"no ids", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"token_ids":[]}`)) }, OutcomeError},
		{"negative id", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"token_ids":[-1]}`)) }, OutcomeError},
		{"placeholder outside", jsonAnswer(generateRequest([]uint32{1}, map[string]any{
			"mm_hashes": map[string]any{"image": []string{"a"}}, "mm_placeholders": map[string]any{"image": []any{map[string]int{"offset": 0, "length": 2}}},
		})), OutcomeError},
		{"slow", func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}, OutcomeTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad, ok := newServer(t, tt.answer), newServer(t, good)
			cfg := DefaultConfig()
			cfg.Failures, cfg.Reuse = 2, 0
			c := New(cfg, nil)
			var outcomes []string
			c.Observe = func(_, o string, _ time.Duration) { outcomes = append(outcomes, o) }
			for i := range 3 {
				ids, _, err := c.Render(context.Background(), nil, []string{bad.URL, ok.URL}, "/v1/chat/completions", []byte(fmt.Sprintf(`{"n":%d}`, i)), false)
				if tt.outcome == OutcomeRefused {
					var se *StatusError
					if !errors.As(err, &se) || se.Code != 400 || se.Message != "bad" || ids != nil {
						t.Fatalf("Render = %v, %v; want the 400 with its message", ids, err)
					}
					continue
				}
				if err != nil || !slices.Equal(ids, []uint32{5, 6}) {
					t.Fatalf("call %d: Render = %v, %v; want the next endpoint's answer", i, ids, err)
				}
			}
			wantBad := int64(3)
			switch tt.outcome {
			case OutcomeError, OutcomeTimeout:
				wantBad = 2 // the breaker opened after two failures
			case OutcomeNotServed:
				wantBad = 1
			}
			if got := bad.calls.Load(); got != wantBad || outcomes[0] != tt.outcome {
				t.Errorf("failing endpoint called %d times (want %d), outcomes %v (first want %s)", got, wantBad, outcomes, tt.outcome)
			}
		})
	}
}

func TestRenderBreakerRecovers(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	good := jsonAnswer(generateRequest([]uint32{1}, nil))
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(503)
			return
		}
		good(w, r)
	})
	cfg := DefaultConfig()
	cfg.Failures, cfg.Cooldown, cfg.Reuse = 1, time.Minute, 0
	c := New(cfg, nil)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	render := func() error {
		_, _, err := c.Render(context.Background(), nil, []string{s.URL}, "/v1/completions", []byte(`{}`), false)
		return err
	}
	if err := render(); err == nil {
		t.Fatal("a 503 rendered")
	}
	if err := render(); !errors.Is(err, ErrOpen) || s.calls.Load() != 1 {
		t.Fatalf("breaker open: Render = %v after %d calls, want ErrOpen without a call", err, s.calls.Load())
	}
	now = now.Add(time.Minute)
	fail.Store(false)
	if err := render(); err != nil {
		t.Fatalf("after the cooldown: Render = %v, want the trial call to succeed", err)
	}
	if c.Open(s.URL, "/v1/completions", now) {
		t.Error("breaker still open after a good trial")
	}
}

func TestRenderReusesAndBounds(t *testing.T) {
	s := newServer(t, jsonAnswer(generateRequest([]uint32{3, 4}, nil)))
	cfg := DefaultConfig()
	cfg.MaxInFlight = 1
	c := New(cfg, nil)
	body := []byte(`{"model":"m","prompt":"x"}`)
	for range 3 {
		if ids, _, err := c.Render(context.Background(), nil, []string{s.URL}, "/v1/completions", body, false); err != nil || !slices.Equal(ids, []uint32{3, 4}) {
			t.Fatalf("Render = %v, %v", ids, err)
		}
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("the same body within the reuse window made %d calls, want 1", n)
	}
	c.sem <- struct{}{} // MaxInFlight calls in flight
	if _, _, err := c.Render(context.Background(), nil, []string{s.URL}, "/v1/completions", []byte(`{"other":1}`), false); !errors.Is(err, ErrBusy) {
		t.Errorf("at MaxInFlight: Render = %v, want ErrBusy", err)
	}
	<-c.sem
}

func TestPath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/chat/completions": "/v1/chat/completions/render", "/v1/completions?x=1": "/v1/completions/render",
		"/v1/messages/": "/v1/messages/render", "/v1/responses": "/v1/responses/render",
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := json.Marshal(generateRequest([]uint32{1, 2, 3}, map[string]any{"mm_hashes": map[string]any{"image": []string{"a"}}, "mm_placeholders": map[string]any{"image": []any{map[string]int{"offset": 1, "length": 2}}}}))
	for _, s := range []string{string(b), `[{"token_ids":[1]}]`, `{"token_ids":[4294967296]}`, `{"features":null,"token_ids":[0]}`, `{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		r, err := Decode([]uint32{9}, []byte(data))
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !slices.Equal(r.IDs, []uint32{9}) {
				t.Fatalf("Decode(%q) = %v, %v", data, r, err)
			}
			return
		}
		n := len(r.IDs) - 1
		if n <= 0 || r.IDs[0] != 9 {
			t.Fatalf("Decode(%q) = %v: want the ids after dst", data, r.IDs)
		}
		for i, it := range r.MM {
			if it.Offset < 0 || it.Length <= 0 || it.Offset+it.Length > n || (i > 0 && it.Offset < r.MM[i-1].Offset+r.MM[i-1].Length) {
				t.Fatalf("Decode(%q): item %+v out of bounds or overlapping", data, it)
			}
		}
	})
}

// BenchmarkDecode100k decodes the render answer of a 100k-token prompt
// (ids of every width, as a real vocabulary gives): MB/s of JSON.
func BenchmarkDecode100k(b *testing.B) {
	ids := make([]uint32, 100_000)
	for i := range ids {
		ids[i] = uint32(i*7919) % 151_936
	}
	data, _ := json.Marshal(generateRequest(ids, nil))
	dst := make([]uint32, 0, len(ids))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := Decode(dst[:0], data)
		if err != nil || len(r.IDs) != len(ids) {
			b.Fatal(err)
		}
	}
}
