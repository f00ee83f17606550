package extproc

import (
	"fmt"

	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// bufferExponents are the capacities (powers of two, 2 KiB to 8 MiB) of
// the buffers messages to Envoy are marshaled into and messages from it
// joined in. gRPC's default pool jumps from 32 KiB to 1 MiB, so every
// re-sent body chunk (up to Config.ChunkBytes, 62,000 bytes by default)
// took a 1 MiB buffer that gRPC clears on each use and allocates again
// whenever a collection emptied the pool: most of a decision's garbage.
// Here a message takes at most twice its size.
var bufferExponents = []uint8{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}

// minSendBuffer is the smallest buffer gRPC returns to its pool after
// writing (it keeps none of 1 KiB or less).
const minSendBuffer = 1<<10 + 1

// codec is gRPC's proto codec (its name, its wire format) with buffers
// sized for kvrouter's messages, sent and received.
type codec struct {
	pool mem.BufferPool
}

func newCodec() (codec, error) {
	pool, err := mem.NewBinaryTieredBufferPool(bufferExponents...)
	if err != nil {
		return codec{}, fmt.Errorf("extproc: gRPC buffers: %w", err)
	}
	return codec{pool: pool}, nil
}

// Name is the codec's content subtype, that of gRPC's proto codec.
func (codec) Name() string { return grpcproto.Name }

// messageOf is v as a protobuf message; nil when it is none.
func messageOf(v any) proto.Message {
	switch x := v.(type) {
	case protoadapt.MessageV2:
		return x
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(x)
	}
	return nil
}

// Unmarshal decodes a received message. A message that arrived in several
// pieces (one per HTTP/2 frame: anything over 16 KiB) is joined in a
// pooled buffer first, as gRPC's own codec does, but from kvrouter's pool:
// gRPC's default gives a message over 32 KiB (a BUFFERED body, a large
// streamed chunk) a 1 MiB buffer and clears all of it (see the BUFFERED
// row of docs/performance.md's load tests). The decoded message copies
// what it keeps, so the buffer goes back at once.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("extproc: unmarshal %T: not a proto message", v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := c.pool.Get(data.Len())
	data.CopyTo(*buf)
	err := proto.Unmarshal(*buf, m)
	c.pool.Put(buf)
	return err
}

// Marshal encodes v into a pooled buffer that gRPC returns to the pool
// once the message is written.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("extproc: marshal %T: not a proto message", v)
	}
	// UseCachedSize reuses the size computed just before; safe because the
	// message is not changed in between.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	// Small messages too (a streamed reply is thousands of them) take a
	// pooled buffer: one big enough that gRPC gives it back.
	buf := c.pool.Get(max(size, minSendBuffer))
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}
