package extproc

import (
	"math"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvrouter/kvrouter/router"
)

// The gateway headers and metadata kvrouter speaks; the routing headers
// are router's.
const (
	headerDestination = "x-gateway-destination-endpoint"
	headerSubset      = "x-gateway-destination-endpoint-subset"
	headerServed      = "x-gateway-destination-endpoint-served"
	namespaceLB       = "envoy.lb"
	namespaceSubset   = "envoy.lb.subset_hint"
)

// setHeaders builds a mutation that overwrites each key with its value,
// given as raw_value only: Envoy reads nothing else.
func setHeaders(kv ...string) *extprocv3.HeaderMutation {
	hm := &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.SetHeaders = append(hm.SetHeaders, &corev3.HeaderValueOption{
			Header: &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])},
		})
	}
	return hm
}

// routingHeaders are the x-kvrouter-* headers of a decision, as key, value,
// key, value….
func routingHeaders(d *router.Decision) []string {
	var buf [4][2]string
	hs := d.AppendHeaders(buf[:0])
	kv := make([]string, 0, 2*len(hs))
	for _, h := range hs {
		kv = append(kv, h[0], h[1])
	}
	return kv
}

// destination is the common response that sends the request to d's pod:
// the destination header (with the routing headers, the data-parallel rank
// when d chose one, the prefill pod's header when one computes the prompt,
// and with tracing on the traceparent naming kvrouter's span) and a
// cleared route cache.
func destination(d *router.Decision) *extprocv3.CommonResponse {
	kv := append([]string{headerDestination, endpoints(d)}, routingHeaders(d)...)
	if rank, ok := d.RankHeader(); ok {
		kv = append(kv, router.HeaderDPRank, rank)
	}
	if name, value, ok := d.PrefillHeader(); ok {
		kv = append(kv, name, value)
	}
	if parent, state := d.TraceHeaders(); parent != "" {
		kv = append(kv, "traceparent", parent)
		if state != "" {
			kv = append(kv, "tracestate", state)
		}
	}
	return &extprocv3.CommonResponse{HeaderMutation: setHeaders(kv...), ClearRouteCache: true}
}

// destinationMetadata is the envoy.lb dynamic metadata naming d's pod.
func destinationMetadata(d *router.Decision) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		namespaceLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			headerDestination: structpb.NewStringValue(endpoints(d)),
		}}),
	}}
}

func requestHeadersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c},
	}}
}

func responseHeadersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: c},
	}}
}

func bodyResponse(request bool, c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: c}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

// chunkMessage is the answer that re-sends one piece of a body in
// FULL_DUPLEX_STREAMED mode, kept by a stream for every piece it sends (a
// streamed reply is thousands): Send has marshaled it when it returns.
type chunkMessage struct {
	resp     extprocv3.ProcessingResponse
	request  extprocv3.ProcessingResponse_RequestBody
	response extprocv3.ProcessingResponse_ResponseBody
	body     extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.BodyMutation
	streamed extprocv3.BodyMutation_StreamedResponse
	piece    extprocv3.StreamedBodyResponse
}

// set makes the message re-send body, of the request or the response, and
// returns it.
func (c *chunkMessage) set(request bool, body []byte, eos bool) *extprocv3.ProcessingResponse {
	c.piece.Body, c.piece.EndOfStream = body, eos
	c.streamed.StreamedResponse = &c.piece
	c.mutation.Mutation = &c.streamed
	c.common.BodyMutation = &c.mutation
	c.body.Response = &c.common
	if request {
		c.request.RequestBody = &c.body
		c.resp.Response = &c.request
	} else {
		c.response.ResponseBody = &c.body
		c.resp.Response = &c.response
	}
	return &c.resp
}

func trailersResponse(request bool) *extprocv3.ProcessingResponse {
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// immediate turns a router refusal into Envoy's local reply: the status and
// a JSON error body in the shape of the API of path (router.Error.Body).
// This is the one place refusals become responses.
func immediate(e *router.Error, path string) *extprocv3.ProcessingResponse {
	headers := []string{"content-type", "application/json"}
	if e.RetryAfter > 0 {
		headers = append(headers, "retry-after", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: setHeaders(headers...),
			Body:    e.Body(path),
			Details: "kvrouter_" + e.Type,
		},
	}}
}

// endpoints is the destination value: the pick, then its fallbacks, comma-
// separated ("ip:port,ip:port", the Endpoint Picker protocol's list).
func endpoints(d *router.Decision) string {
	if len(d.Fallbacks) == 0 {
		return d.Address
	}
	return d.Address + "," + strings.Join(d.Fallbacks, ",")
}

// servedEndpoint is the endpoint the proxy reports served the request
// (envoy.lb metadata, x-gateway-destination-endpoint-served), or "".
func servedEndpoint(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[namespaceLB].GetFields()[headerServed].GetStringValue()
}
