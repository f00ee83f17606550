package router

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the router's spans' instrumentation scope.
const tracerName = "github.com/kvrouter/kvrouter/router"

// startRoute starts the span of one request's routing, a child of ctx's,
// from the global tracer provider: OpenTelemetry's no-op one unless tracing
// is on (internal/tracing). Its children come from the same provider.
func startRoute(ctx context.Context) (context.Context, trace.Span) {
	return otel.GetTracerProvider().Tracer(tracerName).Start(ctx, "kvrouter.route", trace.WithSpanKind(trace.SpanKindInternal))
}

// child starts a span under ctx's, from the same provider.
func child(ctx context.Context, name string, opts ...trace.SpanStartOption) trace.Span {
	_, s := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, name, opts...)
	return s
}

// stage starts a child span of a wait that is happening now, when span
// (nil with tracing off) records; the returned func ends it.
func stage(ctx context.Context, span trace.Span, name string) func() {
	if span == nil || !span.IsRecording() {
		return func() {}
	}
	s := child(ctx, name)
	return func() { s.End() }
}

// endRoute describes the routing of req in its span (in ctx, a child of
// parent) and ends it, and gives d the trace context its pod's request
// carries, whose parent is this span. Attributes name the model, the pod,
// the blocks and the reason, never the prompt.
func endRoute(ctx context.Context, parent trace.SpanContext, span trace.Span, req Request, d *Decision, err error) {
	defer span.End()
	if d != nil && span.SpanContext().IsValid() && span.SpanContext().SpanID() != parent.SpanID() {
		// A tracer provider made the span (the no-op one passes the parent's on).
		c := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, c)
		d.traceparent, d.tracestate = c["traceparent"], c["tracestate"]
	}
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("kvrouter.request_id", req.ID), attribute.String("url.path", req.Path))
	if req.Objective != "" {
		span.SetAttributes(attribute.String("kvrouter.objective", req.Objective))
	}
	if err != nil {
		if e := AsError(err); e != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", e.Status), attribute.String("error.type", e.Type))
		}
		span.SetStatus(codes.Error, err.Error())
		return
	}
	tokenization := "exact"
	switch d.Reason {
	case ReasonPrefix, ReasonLoad, ReasonPlacement:
	default:
		tokenization = "none"
	}
	span.SetAttributes(
		attribute.String("kvrouter.model", d.Model), attribute.String("kvrouter.pod", d.Pod),
		attribute.String("kvrouter.endpoint", d.Address), attribute.String("kvrouter.reason", string(d.Reason)),
		attribute.Int("kvrouter.cached_blocks", d.Matched), attribute.Int("kvrouter.total_blocks", d.Total),
		attribute.Int("kvrouter.prompt_tokens", d.Tokens), attribute.String("kvrouter.tokenization", tokenization))
	if d.PrefillPod != "" {
		span.SetAttributes(attribute.String("kvrouter.prefill_pod", d.PrefillPod))
	}
	if d.DPRank >= 0 {
		span.SetAttributes(attribute.String("kvrouter.dp_rank", strconv.Itoa(d.DPRank)))
	}
	// The decision's stages ran one after the other from its start.
	t := d.started
	for _, st := range [...]struct {
		name string
		took time.Duration
	}{
		{"kvrouter.parse", d.Stages.Parse},
		{"kvrouter.tokenize", d.Stages.Tokenize},
		{"kvrouter.hash", d.Stages.Hash},
		{"kvrouter.match", d.Stages.Match},
		{"kvrouter.score", d.Stages.Score},
	} {
		s := child(ctx, st.name, trace.WithTimestamp(t))
		t = t.Add(st.took)
		s.End(trace.WithTimestamp(t))
	}
}

// TraceHeaders are the W3C trace context headers for the request to d's
// pod: traceparent names kvrouter's span as the parent, so the pod's own
// spans (vLLM's --otlp-traces-endpoint) join the trace. Both "" with
// tracing off.
func (d *Decision) TraceHeaders() (traceparent, tracestate string) {
	return d.traceparent, d.tracestate
}
