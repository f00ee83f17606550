package extproc

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/router"
)

// stream is the state of one HTTP request's ext_proc stream.
type stream struct {
	srv     *Server
	send    func(*extprocv3.ProcessingResponse) error
	mode    BodyMode
	respFDS bool // response bodies arrive FULL_DUPLEX_STREAMED: echo them
	// respNone: Envoy announced it sends no response body (ask for it
	// with Config.ResponseIDs); rid reads a Responses reply's id.
	respNone bool
	rid      router.ResponseIDReader
	req      router.Request
	body     []byte
	buf      *[]byte // the pooled buffer body grew from; nil when body is not ours to recycle
	hint     int     // bytes to reserve for the body (from content-length)
	sawBody  bool    // a request_body message arrived
	answered bool    // the request path is answered: the destination is sent
	decision *router.Decision
	chunk    chunkMessage // re-sends body pieces
	// trace is the request's W3C trace context headers (traceparent,
	// tracestate), when it carries them.
	trace propagation.MapCarrier
}

func newStream(s *Server, srv extprocv3.ExternalProcessor_ProcessServer) *stream {
	return &stream{srv: s, send: srv.Send, mode: s.cfg.BodyMode, respFDS: s.cfg.BodyMode == FullDuplexStreamed}
}

// end releases the request's load when the stream ends, however it ends.
func (st *stream) end() {
	if st.decision != nil {
		st.decision.Done()
	}
}

// handle answers one message; done means the stream is finished (an
// immediate response was sent).
func (st *stream) handle(ctx context.Context, req *extprocv3.ProcessingRequest) (done bool, err error) {
	if pc := req.GetProtocolConfig(); pc != nil {
		st.protocol(pc)
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(ctx, r.RequestHeaders, req.GetMetadataContext())
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.requestTrailers(ctx)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, st.responseHeaders(r.ResponseHeaders, req.GetMetadataContext())
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, st.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		st.end()
		return false, st.send(trailersResponse(false))
	default:
		return false, nil // flow-control and future messages need no answer
	}
}

// protocol adopts the body modes Envoy announces in a stream's first
// message (Envoy 1.34+).
func (st *stream) protocol(pc *extprocv3.ProtocolConfiguration) {
	switch pc.GetRequestBodyMode() {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		st.mode = FullDuplexStreamed
	case filterv3.ProcessingMode_BUFFERED:
		st.mode = Buffered
	}
	st.respFDS = pc.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	st.respNone = pc.GetResponseBodyMode() == filterv3.ProcessingMode_NONE
}

func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func (st *stream) requestHeaders(ctx context.Context, h *extprocv3.HttpHeaders, md *corev3.Metadata) (bool, error) {
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch key := strings.ToLower(hv.GetKey()); key {
		case ":path":
			st.req.Path = headerValue(hv)
		case "x-request-id":
			st.req.ID = headerValue(hv)
		case router.HeaderObjective:
			st.req.Objective = headerValue(hv)
		case "content-length":
			st.hint = bodyHint(headerValue(hv), st.srv.cfg.MaxBodyBytes)
		case "traceparent", "tracestate":
			if st.trace == nil {
				st.trace = propagation.MapCarrier{}
			}
			st.trace[key] = headerValue(hv)
		}
	}
	st.req.Subset = st.subsetHint(md)
	switch {
	case h.GetEndOfStream(): // no body: route now
		return st.finish(ctx, false)
	case st.mode == Buffered: // Envoy sends the body only after this answer
		return false, st.send(requestHeadersResponse(&extprocv3.CommonResponse{}))
	default: // FULL_DUPLEX_STREAMED: answer once the body is complete
		return false, nil
	}
}

// subsetHint reads the endpoint subset Envoy allows, or nil for any. The
// value may be a list of strings or one string, each entry "ip:port", a
// bare IP or several of them comma-separated (what header-to-metadata rules
// produce); entries that are none of these are ignored and counted.
func (st *stream) subsetHint(md *corev3.Metadata) *router.Subset {
	fm, ok := md.GetFilterMetadata()[namespaceSubset]
	if !ok {
		return nil
	}
	v, ok := fm.GetFields()[headerSubset]
	if !ok {
		return nil
	}
	var entries []string
	bad := 0
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		entries = []string{k.StringValue}
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if sv, ok := e.GetKind().(*structpb.Value_StringValue); ok {
				entries = append(entries, sv.StringValue)
			} else {
				bad++
			}
		}
	default:
		bad++
	}
	subset, ignored := router.ParseSubset(entries)
	if bad += ignored; bad > 0 {
		st.srv.metrics.subsetIgnored.Add(float64(bad))
	}
	return subset
}

func (st *stream) requestBody(ctx context.Context, b *extprocv3.HttpBody) (bool, error) {
	if st.answered {
		return false, nil // an extra end_of_stream after the body was answered
	}
	if len(st.body)+len(b.GetBody()) > st.srv.cfg.MaxBodyBytes {
		st.srv.metrics.refused(413)
		e := router.TooLarge(st.srv.cfg.MaxBodyBytes)
		st.srv.router.Refused(st.req.ID, st.req.Path, "", e)
		return true, st.send(immediate(e, st.req.Path))
	}
	// BUFFERED sends the whole body in one message, its end_of_stream false
	// only when trailers follow; every body message needs an answer.
	last := st.mode == Buffered || b.GetEndOfStream()
	st.appendBody(b.GetBody(), last)
	st.sawBody = true
	if !last {
		return false, nil
	}
	return st.finish(ctx, false)
}

// appendBody adds a chunk to the body. A body that arrives in one message
// is used as received; a longer one is gathered in a pooled buffer sized
// from content-length.
func (st *stream) appendBody(chunk []byte, last bool) {
	switch {
	case st.sawBody:
		st.body = append(st.body, chunk...)
	case last:
		st.body = chunk
	default:
		if n := max(len(chunk), st.hint); n <= maxBodyHint {
			st.buf = st.srv.bodies.get(n)
			st.body = append(*st.buf, chunk...)
		} else {
			st.body = append([]byte(nil), chunk...)
		}
	}
}

// releaseBody recycles the body's buffer. Call it only once nothing can
// reference the body: the router has returned (Router must not keep
// req.Body), its re-sent chunks are marshaled (Send copies them), and no
// error that might quote it is pending.
func (st *stream) releaseBody() {
	if st.buf != nil {
		*st.buf = st.body
		st.srv.bodies.put(st.buf)
	}
	st.buf, st.body, st.req.Body = nil, nil, nil
}

func (st *stream) requestTrailers(ctx context.Context) (bool, error) {
	if st.answered {
		return false, st.send(trailersResponse(true))
	}
	return st.finish(ctx, true)
}

// finish routes the complete request and sends the destination: in
// FULL_DUPLEX_STREAMED mode the held header response, then the body again;
// in BUFFERED mode the body response. With trailers, a trailers response
// ends it instead of an end_of_stream body chunk.
func (st *stream) finish(ctx context.Context, trailers bool) (bool, error) {
	st.answered = true
	st.req.Body = st.body
	if st.trace != nil {
		ctx = otel.GetTextMapPropagator().Extract(ctx, st.trace)
	}
	d, err := st.srv.router.Route(ctx, st.req)
	if err != nil {
		e := router.AsError(err)
		if e == nil {
			return false, fmt.Errorf("route request %s: %w", st.req.ID, err)
		}
		st.srv.metrics.refused(e.Status)
		return true, st.send(immediate(e, st.req.Path))
	}
	st.decision = d
	resp := requestHeadersResponse(destination(d))
	if st.mode == Buffered && st.sawBody {
		resp = bodyResponse(true, destination(d))
	}
	resp.DynamicMetadata = destinationMetadata(d)
	if err := st.send(resp); err != nil {
		return false, err
	}
	if st.mode == FullDuplexStreamed && (st.sawBody || trailers) {
		if err := st.sendChunks(true, st.body, !trailers); err != nil {
			return false, err
		}
	}
	if trailers {
		return false, st.send(trailersResponse(true))
	}
	return false, nil
}

// sendChunks re-sends body in pieces of at most Config.ChunkBytes; the last
// carries eos. An empty body is one empty piece.
func (st *stream) sendChunks(request bool, body []byte, eos bool) error {
	n := st.srv.cfg.ChunkBytes
	defer func() { st.chunk.piece.Body = nil }() // the message keeps no body between calls
	for {
		piece := body[:min(n, len(body))]
		body = body[len(piece):]
		if err := st.send(st.chunk.set(request, piece, eos && len(body) == 0)); err != nil {
			return err
		}
		if len(body) == 0 {
			return nil
		}
	}
}

// responseHeaders tells the client where its request went. The pod's first
// response byte means its prefill is done. When the proxy walked the
// fallback list, the endpoint that served takes the request's load.
func (st *stream) responseHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) error {
	c := &extprocv3.CommonResponse{}
	resp := responseHeadersResponse(c)
	if d := st.decision; d != nil {
		d.Served(servedEndpoint(md))
		d.Prefilled()
		c.HeaderMutation = setHeaders(routingHeaders(d)...)
		if st.respNone && st.srv.cfg.ResponseIDs && d.LearnsResponseID() && !h.GetEndOfStream() {
			// Envoy sends the reply's body only when asked (its filter's
			// allow_mode_override), every piece then awaiting an answer.
			resp.ModeOverride = &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_STREAMED}
			st.respNone = false
		}
	}
	if h.GetEndOfStream() {
		st.end()
	}
	return st.send(resp)
}

// responseBody echoes the pod's reply in FULL_DUPLEX_STREAMED mode (Envoy
// keeps no copy) and acknowledges it otherwise.
func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if d := st.decision; d != nil && d.LearnsResponseID() {
		if id := st.rid.Feed(b.GetBody()); id != "" {
			d.ResponseID(id)
		}
	}
	if b.GetEndOfStream() {
		st.end()
	}
	if !st.respFDS {
		return st.send(bodyResponse(false, &extprocv3.CommonResponse{}))
	}
	return st.sendChunks(false, b.GetBody(), b.GetEndOfStream())
}
