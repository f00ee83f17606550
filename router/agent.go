package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/jsonlex"
	"github.com/kvrouter/kvrouter/tokenizer/chat"
)

// messagesRequest checks an Anthropic Messages body as vLLM's schema does
// and sets p.Chat to the chat template's input vLLM converts it to.
func (s *bodyScan) messagesRequest(p *Parsed) error {
	if s.maxTokens.absent() {
		return badRequest("max_tokens", "max_tokens is required")
	}
	n, err := strconv.ParseInt(s.maxTokens.str, 10, 64)
	if s.maxTokens.kind != jsonlex.Number || err != nil {
		return badRequest("max_tokens", "max_tokens must be an integer")
	}
	if n <= 0 {
		return badRequest("max_tokens", "max_tokens must be positive")
	}
	req, err := s.anthropic.Request(n)
	return s.converted(p, req, err, s.anthropic.Limit)
}

// responsesRequest checks an OpenAI Responses body as vLLM's schema does
// and sets p.Chat to the chat template's input vLLM converts it to, and
// p.PreviousResponseID.
func (s *bodyScan) responsesRequest(p *Parsed) error {
	var err error
	if p.PreviousResponseID, err = s.previousResponseID.text("previous_response_id", false); err != nil {
		return err
	}
	if s.responses.Input == nil {
		return badRequest("input", "input is required")
	}
	req, err := s.responses.Request()
	return s.converted(p, req, err, s.responses.Limit)
}

// converted sets p.Chat from a conversion's result: a *chat.FieldError is
// the 400 vLLM answers; a prompt kvrouter cannot know exactly, or a value
// beyond the template engine's limits, routes the request by load.
func (s *bodyScan) converted(p *Parsed, req *chat.Request, err, limit error) error {
	var fe *chat.FieldError
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.Param, "%s", fe.Message)
	case err != nil:
		p.Chat, p.chatErr = &chat.Request{}, err
	default:
		p.Chat, p.chatErr = req, limit
	}
	return nil
}

// Body is the error's response body in the shape of the API of path: an
// Anthropic error for /v1/messages, else OpenAI's (JSON).
func (e *Error) Body(path string) []byte {
	if KindOf(path) != KindMessages {
		return e.JSON()
	}
	var b struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b.Type, b.Error.Message = "error", e.Message
	switch e.Status {
	case http.StatusBadRequest:
		b.Error.Type = "invalid_request_error"
	case http.StatusNotFound:
		b.Error.Type = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		b.Error.Type = "request_too_large"
	case http.StatusTooManyRequests:
		b.Error.Type = "rate_limit_error"
	case http.StatusServiceUnavailable:
		b.Error.Type = "overloaded_error"
	default:
		b.Error.Type = "api_error"
	}
	out, _ := json.Marshal(&b) // strings always marshal
	return out
}
