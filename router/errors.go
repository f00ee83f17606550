package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Error is a request the router refuses, with the HTTP status and the
// OpenAI error type the client should see. extproc and the standalone proxy
// turn it into a response in one place each.
type Error struct {
	Status  int    // HTTP status: 400, 404, 413, 429, 503
	Type    string // OpenAI error type, e.g. "invalid_request_error"
	Param   string // the offending request field, or ""
	Message string
	// RetryAfter, when set, is said in a Retry-After header (a shed
	// request's 429).
	RetryAfter time.Duration
	// noPod marks a request for a named model no ready pod serves: with
	// Config.ScaleFromZeroWait, it waits for one (capacity.go).
	noPod bool
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("router: %d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("router: %d %s: %s", e.Status, e.Type, e.Message)
}

// AsError returns err's *Error, or nil when err is not a refusal (a real
// internal failure).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func badRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: "model_not_found", Param: "model", Message: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Message: fmt.Sprintf(format, args...)}
}

// TooLarge is the refusal of a body over the configured limit.
func TooLarge(limit int) *Error {
	return &Error{
		Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
		Message: fmt.Sprintf("request body is larger than %d bytes", limit),
	}
}

// JSON is the OpenAI-style error body clients expect:
// {"error": {"message", "type", "param", "code"}}.
func (e *Error) JSON() []byte {
	var b struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
	b.Error.Message, b.Error.Type, b.Error.Code = e.Message, e.Type, e.Status
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	out, _ := json.Marshal(&b) // strings and an int always marshal
	return out
}
