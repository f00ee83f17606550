package envoyclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Mode is the request body mode the simulated Envoy is configured with.
type Mode int

// The body modes the client implements.
const (
	FullDuplexStreamed Mode = iota
	Buffered
)

// Client is a simulated Envoy ext_proc filter.
type Client struct {
	ext extprocv3.ExternalProcessorClient
	// Mode is the request and response body mode.
	Mode Mode
	// SendProtocolConfig adds protocol_config to each stream's first
	// message, as Envoy 1.34+ does.
	SendProtocolConfig bool
	// ReceivingNamespaces are the dynamic metadata namespaces applied
	// (metadata_options.receiving_namespaces.untyped).
	ReceivingNamespaces []string
}

// New returns a client on conn.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{ext: extprocv3.NewExternalProcessorClient(conn), SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"}}
}

// Request is one simulated HTTP request and the pod's reply to it.
type Request struct {
	Method, Path string
	Headers      [][2]string // extra request headers, lower-case keys
	Body         []byte
	// Chunks are the sizes the body arrives in (FULL_DUPLEX_STREAMED); the
	// rest of the body follows in one chunk. Nil: one chunk.
	Chunks []int
	// ExtraEOS sends one more empty end_of_stream body message at the end,
	// as some HTTP/2 clients cause.
	ExtraEOS bool
	// Trailers are request trailers; the body then ends without
	// end_of_stream and a trailers message follows.
	Trailers [][2]string
	// Subset is the endpoint subset hint (envoy.lb.subset_hint); nil: none.
	Subset []string
	// Reply is what the chosen pod answers; nil: 200 with an empty JSON object.
	Reply *Reply
	// AbortAfterBody cancels the stream after sending the body instead of
	// waiting for answers, as a client that disconnects does.
	AbortAfterBody bool
}

// Reply is the upstream pod's response.
type Reply struct {
	Status  int
	Headers [][2]string
	Chunks  [][]byte
}

// Result is what the simulated Envoy did with a request.
type Result struct {
	// Status is the status the client got: the pod's, an immediate
	// response's, 500 for a protocol violation, 503 for a bad destination.
	Status int
	// Details explains a status Envoy made up (like %RESPONSE_CODE_DETAILS%).
	Details string
	// Destination is the endpoint the request went to, "" if none.
	Destination string
	// Upstream are the request headers and body the pod received.
	UpstreamHeaders map[string]string
	UpstreamBody    []byte
	// Metadata is the applied dynamic metadata: namespace → key → value.
	Metadata map[string]map[string]string
	// ClientHeaders and ClientBody are the response the client received.
	ClientHeaders map[string]string
	ClientBody    []byte
	// Rejected counts header mutations Envoy ignored.
	Rejected int
	// Pieces and MaxPiece describe the request body as the server re-sent
	// it in FULL_DUPLEX_STREAMED mode.
	Pieces, MaxPiece int
}

// errViolation fails the request as Envoy fails a spurious or invalid
// response: local reply 500.
type errViolation struct{ msg string }

func (e *errViolation) Error() string { return e.msg }

func violation(format string, args ...any) error {
	return &errViolation{msg: fmt.Sprintf(format, args...)}
}

// Do runs req through the server and returns what Envoy would have done. An
// error is returned only for transport failures the test should see; Envoy's
// own failures (violations, gRPC errors) become Result.Status 500.
func (c *Client) Do(ctx context.Context, req Request) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ext.Process(ctx)
	if err != nil {
		return nil, fmt.Errorf("envoyclient: open stream: %w", err)
	}
	ex := &exchange{c: c, stream: stream, req: req, res: &Result{
		UpstreamHeaders: requestHeaderMap(req), ClientHeaders: map[string]string{}, Metadata: map[string]map[string]string{},
	}}
	err = ex.run()
	if req.AbortAfterBody {
		cancel()
		return ex.res, nil
	}
	var v *errViolation
	switch {
	case errors.As(err, &v):
		ex.res.Status, ex.res.Details = 500, v.msg
	case err != nil:
		ex.res.Status, ex.res.Details = 500, "ext_proc_error_gRPC_error: "+err.Error()
	}
	_ = stream.CloseSend()
	return ex.res, nil
}

func requestHeaderMap(req Request) map[string]string {
	method := req.Method
	if method == "" {
		method = "POST"
	}
	h := map[string]string{
		":method": method, ":path": req.Path, ":authority": "kvrouter.test", ":scheme": "http",
		"x-forwarded-proto": "http", "x-request-id": "envoyclient-request",
	}
	if len(req.Body) > 0 {
		h["content-type"] = "application/json"
		h["content-length"] = strconv.Itoa(len(req.Body))
	}
	for _, kv := range req.Headers {
		h[kv[0]] = kv[1]
	}
	return h
}

// ValidDestination reports whether v is what the ORIGINAL_DST cluster
// accepts: one IP:port (IPv6 in brackets).
func ValidDestination(v string) bool {
	host, port, err := net.SplitHostPort(v)
	if err != nil || net.ParseIP(host) == nil || strings.Contains(v, ",") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}

func (c *Client) protocolConfig() *extprocv3.ProtocolConfiguration {
	if !c.SendProtocolConfig {
		return nil
	}
	mode := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if c.Mode == Buffered {
		mode = filterv3.ProcessingMode_BUFFERED
	}
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: mode}
}

func headerList(h map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range h {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

func subsetMetadata(subset []string) *corev3.Metadata {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if subset == nil {
		return md
	}
	vals := make([]*structpb.Value, len(subset))
	for i, s := range subset {
		vals[i] = structpb.NewStringValue(s)
	}
	md.FilterMetadata["envoy.lb.subset_hint"] = &structpb.Struct{Fields: map[string]*structpb.Value{
		"x-gateway-destination-endpoint-subset": structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}
	return md
}

// recv reads the next response, turning an OK close into io.EOF.
func recv(stream extprocv3.ExternalProcessor_ProcessClient) (*extprocv3.ProcessingResponse, error) {
	r, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	return r, err
}
