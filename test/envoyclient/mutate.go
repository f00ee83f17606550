package envoyclient

import (
	"slices"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// applyCommon applies a CommonResponse's header mutation to the request
// (or response) headers with Envoy's rules, and the response's dynamic
// metadata for the receiving namespaces.
func (ex *exchange) applyCommon(c *extprocv3.CommonResponse, request bool, r *extprocv3.ProcessingResponse) error {
	headers := ex.res.ClientHeaders
	if request {
		headers = ex.res.UpstreamHeaders
	}
	hm := c.GetHeaderMutation()
	for _, o := range hm.GetSetHeaders() {
		h := o.GetHeader()
		if h.GetValue() != "" && len(h.GetRawValue()) > 0 {
			return violation("Only one of value or raw_value in a HeaderValue message should be set, key: %s", h.GetKey())
		}
		key := strings.ToLower(h.GetKey())
		switch {
		case key == ":authority" || key == "host" || key == ":method" || key == ":scheme" || strings.HasPrefix(key, "x-envoy-"):
			ex.res.Rejected++
			continue
		case key == "content-length" && ex.c.Mode == FullDuplexStreamed:
			continue // removed in FULL_DUPLEX_STREAMED
		case !validHeader(key, h.GetRawValue()):
			return violation("invalid header %q in mutation", key)
		}
		value := string(h.GetRawValue()) // Envoy reads raw_value only
		// Envoy's ext_proc reads only the deprecated append field (ENVOY.md §2.4).
		if o.GetAppend().GetValue() && headers[key] != "" { //nolint:staticcheck // see above
			value = headers[key] + "," + value
		}
		headers[key] = value
	}
	for _, k := range hm.GetRemoveHeaders() {
		if strings.HasPrefix(k, ":") || strings.EqualFold(k, "host") {
			ex.res.Rejected++
			continue
		}
		delete(headers, strings.ToLower(k))
	}
	for ns, s := range r.GetDynamicMetadata().GetFields() {
		if !slices.Contains(ex.c.ReceivingNamespaces, ns) {
			continue
		}
		m := ex.res.Metadata[ns]
		if m == nil {
			m = map[string]string{}
			ex.res.Metadata[ns] = m
		}
		for k, v := range s.GetStructValue().GetFields() {
			m[k] = v.GetStringValue()
		}
	}
	return nil
}

func validHeader(key string, value []byte) bool {
	if key == "" {
		return false
	}
	for _, b := range value {
		if b == '\r' || b == '\n' || b == 0 {
			return false
		}
	}
	return !strings.ContainsAny(key, " \t\r\n:") || strings.HasPrefix(key, ":")
}

// response runs the response phase: the pod's headers, then its body.
func (ex *exchange) response() error {
	reply := ex.req.Reply
	if reply == nil {
		reply = &Reply{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Chunks: [][]byte{[]byte("{}")}}
	}
	h := map[string]string{":status": strconv.Itoa(reply.Status)}
	for _, kv := range reply.Headers {
		h[kv[0]] = kv[1]
	}
	for k, v := range h {
		ex.res.ClientHeaders[k] = v
	}
	hasBody := len(reply.Chunks) > 0
	if err := ex.sendHeaders(false, h, !hasBody); err != nil {
		return err
	}
	r, err := recv(ex.stream)
	if err != nil {
		return violation("response headers not answered: %v", err)
	}
	if r.GetResponseHeaders() == nil {
		return violation("spurious message: %T while waiting for the response headers response", r.GetResponse())
	}
	if err := ex.applyCommon(r.GetResponseHeaders().GetResponse(), false, r); err != nil {
		return err
	}
	ex.res.Status = reply.Status
	if !hasBody {
		return nil
	}
	if ex.c.Mode == Buffered { // the whole body in one message, one answer
		var whole []byte
		for _, c := range reply.Chunks {
			whole = append(whole, c...)
		}
		if err := ex.sendBody(false, whole, true); err != nil {
			return err
		}
		r, err := recv(ex.stream)
		if err != nil || r.GetResponseBody() == nil {
			return violation("response body not answered: %v", err)
		}
		ex.res.ClientBody = whole
		return nil
	}
	for i, c := range reply.Chunks {
		if err := ex.sendBody(false, c, i == len(reply.Chunks)-1); err != nil {
			return err
		}
	}
	return ex.awaitEcho()
}

// awaitEcho collects the streamed response pieces until end_of_stream.
func (ex *exchange) awaitEcho() error {
	for {
		r, err := recv(ex.stream)
		if err != nil {
			return violation("response body not answered: %v", err)
		}
		sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return violation("spurious message: response body response without streamed_response")
		}
		ex.res.ClientBody = append(ex.res.ClientBody, sr.GetBody()...)
		if sr.GetEndOfStream() {
			return nil
		}
	}
}
