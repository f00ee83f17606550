package extproc

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kvrouter/kvrouter/router"
)

// capture is an in-memory stream that keeps what the server sends, decoded
// from the marshaled bytes as Envoy reads them.
type capture struct {
	memStream
	out []*extprocv3.ProcessingResponse
}

func (c *capture) Send(r *extprocv3.ProcessingResponse) error {
	data, err := c.codec.Marshal(r)
	if err != nil {
		return err
	}
	defer data.Free()
	got := &extprocv3.ProcessingResponse{}
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		return err
	}
	c.out = append(c.out, got)
	return nil
}

// copyRouter records a copy of each body it routes.
type copyRouter struct{ bodies [][]byte }

func (*copyRouter) Refused(string, string, string, *router.Error) {}

func (c *copyRouter) Route(_ context.Context, req router.Request) (*router.Decision, error) {
	c.bodies = append(c.bodies, bytes.Clone(req.Body))
	return &router.Decision{Pod: "pod-a", Address: "10.1.2.3:8000", Reason: router.ReasonLoad}, nil
}

// fuzzExchange is a FULL_DUPLEX_STREAMED request with the given
// content-length header ("" for none), its body cut in pieces whose sizes
// cycle through the bytes of cuts (each + 1), then trailers or not.
func fuzzExchange(body []byte, cuts uint64, contentLength string, trailers bool) []*extprocv3.ProcessingRequest {
	headers := []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}
	if contentLength != "" {
		headers = append(headers, &corev3.HeaderValue{Key: "content-length", RawValue: []byte(contentLength)})
	}
	msgs := []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: headers}},
	}}}
	for i, rest := 0, body; ; i++ {
		n := min(int(cuts>>(8*(i%8))&0xff)+1, len(rest))
		piece := rest[:n]
		rest = rest[n:]
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: piece, EndOfStream: len(rest) == 0 && !trailers},
		}})
		if len(rest) == 0 {
			break
		}
	}
	if trailers {
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{},
		}})
	}
	return msgs
}

// FuzzStreamBody cuts bodies anywhere, with true, false and absurd
// content-length headers, while recycled buffers are poisoned: the router
// must see the body sent and Envoy get it back whole.
func FuzzStreamBody(f *testing.F) {
	f.Add([]byte(body), uint64(0), "", false)
	f.Add([]byte(body), uint64(0x0102030405060708), "87", false)
	f.Add([]byte(body), uint64(0x10), "10", true)
	f.Add(bytes.Repeat([]byte("x"), 70_000), uint64(0xffffffffffffffff), "999999999999", false)
	f.Add([]byte{}, uint64(0), "0", false)
	f.Fuzz(func(t *testing.T, body []byte, cuts uint64, contentLength string, trailers bool) {
		cr := &copyRouter{}
		srv, err := New(DefaultConfig(), cr, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.bodies.poison = true
		for range 2 { // the second stream reuses the first one's buffer
			st := &capture{memStream: memStream{in: fuzzExchange(body, cuts, contentLength, trailers), codec: srv.codec}}
			if err := srv.Process(st); err != nil {
				t.Fatalf("Process = %v", err)
			}
			if got := cr.bodies[len(cr.bodies)-1]; !bytes.Equal(got, body) {
				t.Fatalf("router saw %d bytes %.40q, want the %d sent", len(got), got, len(body))
			}
			var resent []byte
			eos := false
			for _, r := range st.out {
				sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				if sr == nil {
					continue
				}
				if eos {
					t.Fatalf("a body piece after end_of_stream")
				}
				resent = append(resent, sr.GetBody()...)
				eos = sr.GetEndOfStream()
			}
			if !bytes.Equal(resent, body) || eos == trailers {
				t.Fatalf("re-sent %d bytes %.40q (end_of_stream %v), want the %d sent (end_of_stream %v)", len(resent), resent, eos, len(body), !trailers)
			}
		}
	})
}
