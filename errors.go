package rein

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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

// Error is an error with a SPEC code. It keeps apart what a client may
// read and what only the log may: Message (with Code, Param and RunID) is
// the answer, safe to show to the owner of the request — it never carries
// another owner's data, an instance id, a stack trace, or the text of an
// internal cause — and Err is the cause, for logs, errors.Is and
// errors.As. Error joins them, so a log line has both.
type Error struct {
	Code    Code
	Message string
	// Param names the offending field for invalid_argument
	// (e.g. "events[1].payload.run_id").
	Param string
	// RunID is the run holding the turn, for session_busy; for a conflict
	// about one run's state (an edit of a run that left the queue), that
	// run, with its status in RunStatus.
	RunID     string
	RunStatus RunStatus
	// Err is the underlying cause, for logs; it is never sent to clients.
	Err error
}

func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
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

// Errorf builds an *Error with code c and a message formatted from format
// and args as fmt.Errorf would, with one difference: a %w operand is the
// cause (Err), and its text stays out of the message, which is what a
// client reads (docs/decisions/0081-errorf-keeps-causes-out.md):
//
//   - a cause that is itself a *Error, of any code but internal, is Rein's
//     own text: its Message takes the verb's place
//     (Errorf(CodeInvalidArgument, "history message %d: %w", 2, inner) reads
//     "history message 2: " + inner.Message);
//   - any other cause (a driver's, the network's, the file system's, an
//     internal error's) is left out with the separator before it
//     ("store unreachable: %w" reads "store unreachable");
//   - a left-out cause followed by more text ("%w happened") would leave a
//     sentence built around a hole: the message is then empty, and the
//     server answers the code's generic message.
//
// A format with explicit operand indexes ("%[2]s") or a malformed verb is
// read by fmt alone: with a %w cause its message is empty, without one it
// is fmt's text. Error() still holds the cause's full text, for logs.
// With several %w verbs, Err unwraps to each of them.
func Errorf(c Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: c}
	switch w := err.(type) {
	case interface{ Unwrap() error }:
		e.Err = w.Unwrap()
	case interface{ Unwrap() []error }:
		e.Err = err
	}
	msg, ok := publicf(format, args)
	switch {
	case ok:
		e.Message = msg
	case e.Err == nil:
		// A format only fmt reads right (explicit operand indexes, a
		// malformed verb) and no cause to keep out: fmt's text, without
		// the operands it lists as unused (an error among them).
		e.Message, _, _ = strings.Cut(err.Error(), "%!(EXTRA ")
	}
	return e
}

// publicf formats format and args the way fmt does, each %w operand
// rendered by publicCause; see Errorf for what becomes of a cause left out.
// ok is false for a format it leaves to fmt (scanVerb).
func publicf(format string, args []any) (msg string, ok bool) {
	var (
		b      strings.Builder
		argNum int
		// hole is the length of b when a cause was left out; any text
		// after it makes the message a sentence with a hole.
		hole = -1
	)
	for i := 0; i < len(format); {
		if format[i] != '%' {
			j := strings.IndexByte(format[i:], '%')
			if j < 0 {
				j = len(format) - i
			}
			lit := format[i : i+j]
			if hole >= 0 && strings.Trim(lit, causeClosers) != "" {
				return "", true
			}
			if hole < 0 {
				b.WriteString(lit)
			}
			i += j
			continue
		}
		spec, used, verb, n, ok := scanVerb(format[i:], args, &argNum)
		if !ok {
			return "", false
		}
		i += n
		switch {
		case verb == '%':
			if hole >= 0 {
				return "", true
			}
			b.WriteByte('%')
		case verb == 'w':
			var cause any
			if len(used) > 0 {
				cause = used[len(used)-1]
			}
			text := publicCause(cause)
			switch {
			case text != "" && hole >= 0:
				return "", true
			case text != "":
				b.WriteString(text)
			case hole < 0:
				hole = b.Len()
			}
		case hole >= 0:
			return "", true
		default:
			fmt.Fprintf(&b, spec, used...)
		}
	}
	out := b.String()
	if hole >= 0 {
		out = strings.TrimRight(out[:hole], causeOpeners)
	}
	return out, true
}

// What joins a message to a cause left out of it ("store unreachable: %w",
// "read failed (%w)"): the openers before the cause go with it, and only
// closers may follow it.
const (
	causeOpeners = " :;,-–—(["
	causeClosers = " :;,-–—)]"
)

// publicCause is what a %w operand shows of itself in a message: the
// message of a *Error that is not internal, or nothing.
func publicCause(cause any) string {
	if re, ok := cause.(*Error); ok && re != nil && re.Code != CodeInternal {
		return re.Message
	}
	return ""
}

// scanVerb reads the plain verb at the start of s (s[0] == '%'): spec is
// the verb (for fmt.Sprintf with used), used the operands it consumes (a
// '*' width or precision, then the value), verb its letter, n the bytes
// read. argNum is fmt's operand cursor. ok is false for what only fmt
// itself should interpret: an explicit operand index ("%[2]d"), a verb
// cut off by the end of the format, an operand args lack.
func scanVerb(s string, args []any, argNum *int) (spec string, used []any, verb rune, n int, ok bool) {
	take := func() bool {
		if *argNum >= len(args) {
			return false
		}
		used = append(used, args[*argNum])
		*argNum++
		return true
	}
	i := 1
	for i < len(s) && strings.IndexByte("+-# 0", s[i]) >= 0 {
		i++
	}
	// number reads a width or a precision: "*" (an operand) or digits.
	number := func(i int) (int, bool) {
		if i < len(s) && s[i] == '*' {
			return i + 1, take()
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i, true
	}
	if i, ok = number(i); !ok {
		return "", nil, 0, 0, false
	}
	if i < len(s) && s[i] == '.' {
		if i, ok = number(i + 1); !ok {
			return "", nil, 0, 0, false
		}
	}
	if i >= len(s) || s[i] == '[' {
		return "", nil, 0, 0, false
	}
	verb, size := utf8.DecodeRuneInString(s[i:])
	i += size
	if verb == '%' {
		// "%%" alone: fmt reads flags, a width or operands before a '%'
		// its own way.
		return "%%", nil, '%', i, i == 2
	}
	if !take() {
		return "", nil, 0, 0, false
	}
	return s[:i], used, verb, i, true
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
