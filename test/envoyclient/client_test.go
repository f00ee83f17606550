package envoyclient

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// misbehaving answers a FULL_DUPLEX_STREAMED request once its body is
// complete, in the way its behavior names.
type misbehaving struct {
	extprocv3.UnimplementedExternalProcessorServer
	behavior string
}

func header(k, raw, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(raw), Value: value}}
}

func (m *misbehaving) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	dest := "10.0.0.1:8000"
	var sets []*corev3.HeaderValueOption
	switch m.behavior {
	case "both-values":
		sets = append(sets, header("x-gateway-destination-endpoint", dest, dest))
	case "value-only":
		sets = append(sets, header("x-gateway-destination-endpoint", "", dest))
	case "list-destination":
		sets = append(sets, header("x-gateway-destination-endpoint", dest+",10.0.0.2:8000", ""))
	case "rejected":
		sets = append(sets, header("x-gateway-destination-endpoint", dest, ""), header(":authority", "evil", ""), header("x-envoy-retry-on", "5xx", ""))
	default:
		sets = append(sets, header("x-gateway-destination-endpoint", dest, ""))
	}
	headers := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: sets}},
	}}}
	body := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: []byte("{}"), EndOfStream: true},
		}}},
	}}}
	if m.behavior == "plain-body" {
		body.GetRequestBody().Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("{}")}}
	}
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var out []*extprocv3.ProcessingResponse
		switch {
		case req.GetRequestBody().GetEndOfStream() && m.behavior == "body-first":
			out = append(out, body, headers)
		case req.GetRequestBody().GetEndOfStream():
			out = append(out, headers, body)
		case req.GetResponseHeaders() != nil:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case req.GetResponseBody() != nil:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
					StreamedResponse: &extprocv3.StreamedBodyResponse{Body: req.GetResponseBody().GetBody(), EndOfStream: req.GetResponseBody().GetEndOfStream()},
				}}},
			}}})
		}
		for _, r := range out {
			if err := srv.Send(r); err != nil {
				return err
			}
		}
	}
}

func TestEnvoyRules(t *testing.T) {
	tests := []struct {
		behavior     string
		wantStatus   int
		wantDetails  string
		wantRejected int
	}{
		{"ok", 200, "", 0},
		{"body-first", 500, "before the header response", 0},
		{"plain-body", 500, "Normal body mutation", 0},
		{"both-values", 500, "Only one of value or raw_value", 0},
		{"value-only", 503, "no_healthy_upstream", 0},
		{"list-destination", 503, "no_healthy_upstream", 0},
		{"rejected", 200, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.behavior, func(t *testing.T) {
			c := serve(t, &misbehaving{behavior: tt.behavior})
			res, err := c.Do(context.Background(), Request{Path: "/v1/completions", Body: []byte(`{"model":"m"}`), Chunks: []int{3}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus || !strings.Contains(res.Details, tt.wantDetails) || res.Rejected != tt.wantRejected {
				t.Fatalf("Do = %d %q, %d rejected; want %d %q, %d rejected", res.Status, res.Details, res.Rejected, tt.wantStatus, tt.wantDetails, tt.wantRejected)
			}
			if tt.wantStatus == 200 && (res.UpstreamHeaders[":authority"] != "kvrouter.test" || res.Destination != "10.0.0.1:8000") {
				t.Fatalf("Do = %+v, want :authority kept and the request sent to 10.0.0.1:8000", res)
			}
		})
	}
}

func TestValidDestination(t *testing.T) {
	for v, want := range map[string]bool{
		"10.0.0.1:8000": true, "[::1]:8000": true, "10.0.0.1": false, "pod:8000": false,
		"10.0.0.1:0": false, "10.0.0.1:8000,10.0.0.2:8000": false, "": false,
	} {
		if got := ValidDestination(v); got != want {
			t.Errorf("ValidDestination(%q) = %v, want %v", v, got, want)
		}
	}
}

func serve(t *testing.T, s extprocv3.ExternalProcessorServer) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return New(conn)
}
