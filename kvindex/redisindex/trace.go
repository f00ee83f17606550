package redisindex

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/internal/tracing"
)

// The round trips traced, as kvrouter_index_redis_round_trip_seconds names
// them.
const (
	opMatch = iota
	opEvents
	opLoad
	opHomes
	numOps
)

var opNames = [numOps]string{"match", "events", "load", "homes"}

// roundTrips samples the round trips traced: one of each operation a second.
type roundTrips struct{ last [numOps]atomic.Int64 } // unix nanoseconds of the last traced

// trace records one round trip of op as a root span kvrouter.redis.OP when
// tracing is on and none of op was traced within the last second.
func (rt *roundTrips) trace(op int, start, end time.Time, err error) {
	if !tracing.On() {
		return
	}
	last := rt.last[op].Load()
	if end.UnixNano()-last < int64(time.Second) || !rt.last[op].CompareAndSwap(last, end.UnixNano()) {
		return
	}
	_, span := otel.Tracer("github.com/kvrouter/kvrouter/kvindex/redisindex").Start(context.Background(), "kvrouter.redis."+opNames[op],
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", opNames[op])))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}
