package extproc

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// sendBufferExponents are the capacities (powers of two, 2 KiB to 8 MiB)
// of the buffers messages to Envoy are marshaled into. gRPC's default
// pool jumps from 32 KiB to 1 MiB, so every re-sent body chunk (up to
// Config.ChunkBytes, 62,000 bytes by default) took a 1 MiB buffer that
// gRPC clears on each use and allocates again whenever a collection
// emptied the pool: most of a decision's garbage. Here a chunk takes at
// most twice its size.
var sendBufferExponents = []uint8{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}

// minSendBuffer is the smallest buffer gRPC returns to its pool after
// writing (it keeps none of 1 KiB or less).
const minSendBuffer = 1<<10 + 1

// codec is gRPC's proto codec with send buffers sized for kvrouter's
// messages; it unmarshals exactly as gRPC's own.
type codec struct {
	encoding.CodecV2
	pool mem.BufferPool
}

func newCodec() (codec, error) {
	pool, err := mem.NewBinaryTieredBufferPool(sendBufferExponents...)
	if err != nil {
		return codec{}, fmt.Errorf("extproc: send buffers: %w", err)
	}
	base := encoding.GetCodecV2(grpcproto.Name)
	if base == nil {
		return codec{}, fmt.Errorf("extproc: no %q gRPC codec registered", grpcproto.Name)
	}
	return codec{CodecV2: base, pool: pool}, nil
}

// Marshal encodes v into a pooled buffer that gRPC returns to the pool
// once the message is written.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	var m proto.Message
	switch x := v.(type) {
	case protoadapt.MessageV2:
		m = x
	case protoadapt.MessageV1:
		m = protoadapt.MessageV2Of(x)
	default:
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
