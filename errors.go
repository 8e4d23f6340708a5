package rein

import (
	"errors"
	"fmt"
)

// Code is an error code from docs/api.md. Every error that crosses the HTTP
// boundary carries one; internal code uses them too so that the mapping to a
// status code is decided once.
type Code string

// The error codes.
const (
	CodeUnauthenticated Code = "unauthenticated"   // 401
	CodeNotFound        Code = "not_found"         // 404
	CodeInvalidArgument Code = "invalid_argument"  // 400
	CodeSessionBusy     Code = "session_busy"      // 409, with the run id holding the turn
	CodeConflict        Code = "conflict"          // 409
	CodeUnavailable     Code = "unavailable"       // 503
	CodeTooLarge        Code = "payload_too_large" // 413
	CodeTooManyRequests Code = "too_many_requests" // 429, e.g. too many open event streams
	CodeInternal        Code = "internal"          // 500
)

// HTTPStatus is the HTTP status code that carries c.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeUnauthenticated:
		return 401
	case CodeNotFound:
		return 404
	case CodeInvalidArgument:
		return 400
	case CodeSessionBusy, CodeConflict:
		return 409
	case CodeUnavailable:
		return 503
	case CodeTooLarge:
		return 413
	case CodeTooManyRequests:
		return 429
	default:
		return 500
	}
}

// Error is an error with a SPEC code. Messages are safe to show to the
// owner of the request: they never carry another owner's data, an instance
// id, or a stack trace.
type Error struct {
	Code    Code
	Message string
	// Param names the offending field for invalid_argument
	// (e.g. "events[1].payload.run_id").
	Param string
	// RunID is the run holding the turn, for session_busy.
	RunID string
	// Err is the underlying cause, for logs; it is never sent to clients.
	Err error
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Param != "" {
		msg += " (" + e.Param + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) (and the other sentinels) true for
// any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Err == nil
}

// Sentinels to compare against with errors.Is. They match every *Error of
// their code.
var (
	ErrNotFound        = &Error{Code: CodeNotFound}
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrSessionBusy     = &Error{Code: CodeSessionBusy}
	ErrConflict        = &Error{Code: CodeConflict}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrUnauthenticated = &Error{Code: CodeUnauthenticated}
	ErrTooLarge        = &Error{Code: CodeTooLarge}
	ErrTooManyRequests = &Error{Code: CodeTooManyRequests}
	ErrInternal        = &Error{Code: CodeInternal}
)

// Errorf builds an *Error with code c and a formatted message. A %w verb
// also sets the cause.
func Errorf(c Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: c, Message: err.Error(), Err: errors.Unwrap(err)}
}

// InvalidArgument builds an invalid_argument error naming param.
func InvalidArgument(param, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf(format, args...), Param: param}
}

// CodeOf returns the code of the first *Error in err's chain, or internal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Run-ending errors. A run's Wait returns an error wrapping one of these
// when the run did not complete.
var (
	// ErrCancelled: the run was cancelled (status CANCELLED, reason cancelled).
	ErrCancelled = errors.New("rein: run cancelled")
	// ErrTimeout: the run's deadline passed (status CANCELLED, reason timeout).
	ErrTimeout = errors.New("rein: run timed out")
	// ErrInterrupted is the context cause an interrupted step sees.
	ErrInterrupted = errors.New("rein: run interrupted")
	// ErrAlreadyStarted: a run handle was started twice.
	ErrAlreadyStarted = errors.New("rein: run already started")
	// ErrLeaseLost: a write carried a fencing token that no longer holds
	// the session's turn.
	ErrLeaseLost = errors.New("rein: turn lease lost")
)
