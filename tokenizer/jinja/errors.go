package jinja

import "errors"

// Errors wrapped by render and compile failures, one per jinja2 exception
// class that chat templates meet.
var (
	// ErrSyntax is a template that jinja2 refuses to compile.
	ErrSyntax = errors.New("jinja: syntax error")
	// ErrUndefined is a use of an undefined value other than printing,
	// testing or iterating it (jinja2's UndefinedError).
	ErrUndefined = errors.New("jinja: undefined")
	// ErrType is an operation on values of the wrong type (TypeError).
	ErrType = errors.New("jinja: type error")
	// ErrValue is a value of the right type but wrong content (ValueError,
	// ZeroDivisionError, IndexError on a failed unpacking).
	ErrValue = errors.New("jinja: value error")
	// ErrSecurity is an access the sandbox refuses (SecurityError).
	ErrSecurity = errors.New("jinja: unsafe access")
	// ErrRaised is raise_exception called by the template.
	ErrRaised = errors.New("jinja: template raised")
	// ErrLimit is a render or compile stopped by one of the Limits.
	ErrLimit = errors.New("jinja: limit exceeded")
)
