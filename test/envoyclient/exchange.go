package envoyclient

import (
	"errors"
	"io"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// exchange is one request's run through the stream.
type exchange struct {
	c         *Client
	stream    extprocv3.ExternalProcessor_ProcessClient
	req       Request
	res       *Result
	first     bool // the next message is the stream's first
	immediate bool // an immediate response ended the request
	body      []byte
}

var errStop = errors.New("stop")

func (ex *exchange) run() error {
	ex.first = true
	var err error
	if ex.c.Mode == Buffered {
		err = ex.requestBuffered()
	} else {
		err = ex.requestStreamed()
	}
	if err != nil || ex.immediate || ex.req.AbortAfterBody {
		return err
	}
	if err := ex.route(); err != nil {
		if errors.Is(err, errStop) {
			return nil
		}
		return err
	}
	return ex.response()
}

func (ex *exchange) send(m *extprocv3.ProcessingRequest) error {
	if ex.first {
		m.ProtocolConfig = ex.c.protocolConfig()
		ex.first = false
	}
	m.MetadataContext = subsetMetadata(ex.req.Subset)
	err := ex.stream.Send(m)
	if errors.Is(err, io.EOF) {
		return nil // the server ended the stream; Recv tells how
	}
	return err
}

func (ex *exchange) sendHeaders(request bool, h map[string]string, eos bool) error {
	hh := &extprocv3.HttpHeaders{Headers: headerList(h), EndOfStream: eos}
	if request {
		return ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hh}})
	}
	return ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}})
}

func (ex *exchange) sendBody(request bool, b []byte, eos bool) error {
	hb := &extprocv3.HttpBody{Body: b, EndOfStream: eos}
	if request {
		return ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}})
	}
	return ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}})
}

func (ex *exchange) sendTrailers() error {
	ht := &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{}}
	for _, kv := range ex.req.Trailers {
		ht.Trailers.Headers = append(ht.Trailers.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	return ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: ht}})
}

// chunks splits the body as the request says.
func (ex *exchange) chunks() [][]byte {
	var out [][]byte
	b := ex.req.Body
	for _, n := range ex.req.Chunks {
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(b) > 0 || len(out) == 0 {
		out = append(out, b)
	}
	return out
}

// requestStreamed is FULL_DUPLEX_STREAMED: headers and every chunk go out
// without waiting; then the answers are checked in order.
func (ex *exchange) requestStreamed() error {
	hasBody, hasTrailers := len(ex.req.Body) > 0, len(ex.req.Trailers) > 0
	if err := ex.sendHeaders(true, ex.res.UpstreamHeaders, !hasBody && !hasTrailers); err != nil {
		return err
	}
	if hasBody {
		cs := ex.chunks()
		for i, c := range cs {
			if err := ex.sendBody(true, c, i == len(cs)-1 && !hasTrailers); err != nil {
				return err
			}
		}
		if ex.req.ExtraEOS {
			if err := ex.sendBody(true, nil, true); err != nil {
				return err
			}
		}
	}
	if hasTrailers {
		if err := ex.sendTrailers(); err != nil {
			return err
		}
	}
	if ex.req.AbortAfterBody {
		return nil
	}
	return ex.awaitStreamed(hasBody, hasTrailers)
}

// awaitStreamed enforces Envoy's FULL_DUPLEX_STREAMED ordering: the header
// response first, then streamed_response body pieces until end_of_stream
// (or the trailers response).
func (ex *exchange) awaitStreamed(hasBody, hasTrailers bool) error {
	gotHeaders := false
	for {
		r, err := recv(ex.stream)
		if errors.Is(err, io.EOF) {
			return violation("ext_proc stream closed before the request was answered")
		}
		if err != nil {
			return err
		}
		switch m := r.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return ex.applyImmediate(m.ImmediateResponse)
		case *extprocv3.ProcessingResponse_RequestHeaders:
			if gotHeaders {
				return violation("spurious message: a second request headers response")
			}
			gotHeaders = true
			if err := ex.applyCommon(m.RequestHeaders.GetResponse(), true, r); err != nil {
				return err
			}
			if !hasBody && !hasTrailers {
				return nil
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return violation("spurious message: request body response received before the header response")
			}
			sr := m.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return violation("spurious message: Normal body mutation response is received while body_mode_ is FULL_DUPLEX_STREAMED")
			}
			ex.body = append(ex.body, sr.GetBody()...)
			ex.res.Pieces++
			ex.res.MaxPiece = max(ex.res.MaxPiece, len(sr.GetBody()))
			if sr.GetEndOfStream() {
				return nil
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
			if !hasTrailers || !gotHeaders {
				return violation("spurious message: request trailers response")
			}
			return nil
		default:
			return violation("spurious message: %T while processing the request", m)
		}
	}
}

// requestBuffered is BUFFERED: headers, wait, the whole body, wait.
func (ex *exchange) requestBuffered() error {
	hasBody, hasTrailers := len(ex.req.Body) > 0, len(ex.req.Trailers) > 0
	ex.body = ex.req.Body
	if err := ex.sendHeaders(true, ex.res.UpstreamHeaders, !hasBody && !hasTrailers); err != nil {
		return err
	}
	if err := ex.await(func(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
		if r.GetRequestHeaders() == nil {
			return nil
		}
		return orEmpty(r.GetRequestHeaders().GetResponse())
	}, "request headers"); err != nil || ex.immediate || (!hasBody && !hasTrailers) {
		return err
	}
	if err := ex.sendBody(true, ex.req.Body, !hasTrailers); err != nil {
		return err
	}
	if err := ex.await(func(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
		if r.GetRequestBody() == nil {
			return nil
		}
		return orEmpty(r.GetRequestBody().GetResponse())
	}, "request body"); err != nil || ex.immediate || !hasTrailers {
		return err
	}
	if err := ex.sendTrailers(); err != nil {
		return err
	}
	return ex.await(func(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
		if r.GetRequestTrailers() == nil {
			return nil
		}
		return &extprocv3.CommonResponse{}
	}, "request trailers")
}

func orEmpty(c *extprocv3.CommonResponse) *extprocv3.CommonResponse {
	if c == nil {
		return &extprocv3.CommonResponse{}
	}
	return c
}

// await reads the one response a BUFFERED message needs; pick returns its
// common part, or nil when the response does not answer that message.
func (ex *exchange) await(pick func(*extprocv3.ProcessingResponse) *extprocv3.CommonResponse, what string) error {
	r, err := recv(ex.stream)
	if errors.Is(err, io.EOF) {
		return violation("ext_proc stream closed before answering the %s", what)
	}
	if err != nil {
		return err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return ex.applyImmediate(ir)
	}
	c := pick(r)
	if c == nil {
		return violation("spurious message: %T while waiting for the %s response", r.GetResponse(), what)
	}
	if bm := c.GetBodyMutation(); bm != nil {
		switch {
		case bm.GetStreamedResponse() != nil:
			return violation("spurious message: streamed_response in BUFFERED mode")
		case bm.GetClearBody():
			ex.body = nil
		case bm.GetBody() != nil:
			ex.body = bm.GetBody()
		}
	}
	return ex.applyCommon(c, true, r)
}

func (ex *exchange) applyImmediate(ir *extprocv3.ImmediateResponse) error {
	ex.immediate = true
	code := int(ir.GetStatus().GetCode())
	if code < 200 {
		code = 200
	}
	ex.res.Status, ex.res.ClientBody = code, ir.GetBody()
	ex.res.Details = strings.Join(strings.Fields(ir.GetDetails()), "_")
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		ex.res.ClientHeaders[strings.ToLower(h.GetHeader().GetKey())] = string(h.GetHeader().GetRawValue())
	}
	return nil
}

// route checks the destination the way the ORIGINAL_DST cluster reads it.
func (ex *exchange) route() error {
	dest := ex.res.UpstreamHeaders["x-gateway-destination-endpoint"]
	if !ValidDestination(dest) {
		ex.res.Status, ex.res.Details = 503, "no_healthy_upstream: destination "+strconv.Quote(dest)
		return errStop
	}
	ex.res.Destination, ex.res.UpstreamBody = dest, ex.body
	return nil
}
