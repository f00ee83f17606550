package extproc

import (
	"bytes"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// pieces cuts b at the given offsets into a BufferSlice, as gRPC hands
// over a message that arrived in several HTTP/2 frames.
func pieces(b []byte, cuts ...int) mem.BufferSlice {
	var s mem.BufferSlice
	at := 0
	for _, c := range append(cuts, len(b)) {
		s = append(s, mem.SliceBuffer(bytes.Clone(b[at:c])))
		at = c
	}
	return s
}

// TestCodecUnmarshalPieces decodes body messages whole and cut into
// pieces (inside the tag, the length and the body) and requires what
// proto.Unmarshal decodes; a message decoded earlier keeps its body after
// the pooled buffer is used for the next.
func TestCodecUnmarshalPieces(t *testing.T) {
	c, err := newCodec()
	if err != nil {
		t.Fatal(err)
	}
	msg := func(fill byte, n int) []byte {
		b, err := proto.Marshal(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: bytes.Repeat([]byte{fill}, n), EndOfStream: true},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		n    int
		cuts []int
	}{
		{"one piece", 40_000, nil},
		{"frames of 16 KiB", 40_000, []int{16384, 32768}},
		{"inside the tag and the length", 40_000, []int{1, 2, 3, 4}},
		{"a byte each at the end", 100, []int{96, 97, 98, 99}},
		{"over 1 MiB", 1<<20 + 10, []int{16384, 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := msg('a', tc.n), msg('b', tc.n)
			var want, got, next extprocv3.ProcessingRequest
			if err := proto.Unmarshal(first, &want); err != nil {
				t.Fatal(err)
			}
			if err := c.Unmarshal(pieces(first, tc.cuts...), &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, &want) {
				t.Fatalf("decoded %d body bytes, want the %d marshaled", len(got.GetRequestBody().GetBody()), tc.n)
			}
			if err := c.Unmarshal(pieces(second, tc.cuts...), &next); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, &want) {
				t.Fatal("an earlier message changed when the next was decoded: it kept the pooled buffer")
			}
			if b := next.GetRequestBody().GetBody(); len(b) != tc.n || b[0] != 'b' || b[len(b)-1] != 'b' {
				t.Fatalf("second message decoded wrong: %d bytes", len(b))
			}
		})
	}
	if err := c.Unmarshal(pieces([]byte{1, 2}), struct{}{}); err == nil {
		t.Error("Unmarshal into a non-message: no error")
	}
}
