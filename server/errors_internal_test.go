package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// TestPublicError: what a client reads of an error. Causes outside Rein's
// rules never show (5xx answers get a fixed message; a 4xx message loses
// its cause's tail), a rein cause shows as its own message, and no message
// repeats a code.
func TestPublicError(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp db.internal.example:5432: connect: connection refused")
	for _, c := range []struct {
		name   string
		err    error
		status int
		code   rein.Code
		msg    string
	}{
		{"plain error", secret, 500, rein.CodeInternal, msgInternal},
		{"wrapped plain error", fmt.Errorf("list: %w", secret), 500, rein.CodeInternal, msgInternal},
		{"internal", rein.Errorf(rein.CodeInternal, "sqlite /var/lib/rein.db: damaged"), 500, rein.CodeInternal, msgInternal},
		{"unknown code", &rein.Error{Code: "teapot", Message: "short and stout"}, 500, rein.CodeInternal, msgInternal},
		{"unavailable, cause formatted in", rein.Errorf(rein.CodeUnavailable, "store unreachable: %w", secret), 503, rein.CodeUnavailable, msgUnavailable},
		{"unavailable, cause beside", &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: ping: database unreachable", Err: secret}, 503, rein.CodeUnavailable, msgUnavailable},
		{"unavailable, rein cause with a foreign one", rein.Errorf(rein.CodeUnavailable, "not ready: %w", &rein.Error{Code: rein.CodeUnavailable, Message: "down", Err: secret}), 503, rein.CodeUnavailable, msgUnavailable},
		{"unavailable, own rule", rein.Errorf(rein.CodeUnavailable, "the server is shutting down"), 503, rein.CodeUnavailable, "the server is shutting down"},
		{"conflict, cause formatted in", rein.Errorf(rein.CodeConflict, "the write conflicts with a stored row: %w", secret), 409, rein.CodeConflict, "the write conflicts with a stored row"},
		{"conflict, cause mid-message", rein.Errorf(rein.CodeConflict, "%w happened", secret), 409, rein.CodeConflict, genericMessage(rein.CodeConflict)},
		{"conflict, cause beside", &rein.Error{Code: rein.CodeConflict, Message: "turn lease lost", Err: rein.ErrLeaseLost}, 409, rein.CodeConflict, "turn lease lost"},
		{"rein cause", rein.Errorf(rein.CodeInvalidArgument, "history message 2: %w", rein.InvalidArgument("text", "text is empty")), 400, rein.CodeInvalidArgument, "history message 2: text is empty"},
		{"rein cause wrapping a foreign one", rein.Errorf(rein.CodeNotFound, "lookup: %w", rein.Errorf(rein.CodeNotFound, "session not found: %w", secret)), 404, rein.CodeNotFound, "lookup: session not found"},
		{"internal rein cause", rein.Errorf(rein.CodeConflict, "apply: %w", rein.Errorf(rein.CodeInternal, "boom at /var/lib/rein.db")), 409, rein.CodeConflict, "apply"},
		{"message repeating its code", &rein.Error{Code: rein.CodeInvalidArgument, Message: "invalid_argument: bad"}, 400, rein.CodeInvalidArgument, "bad"},
		{"empty message", &rein.Error{Code: rein.CodeNotFound}, 404, rein.CodeNotFound, "not found"},
		{"too many", rein.Errorf(rein.CodeTooManyRequests, "slow down"), 429, rein.CodeTooManyRequests, "slow down"},
		{"busy", &rein.Error{Code: rein.CodeSessionBusy, Message: "busy", RunID: "run_1"}, 409, rein.CodeSessionBusy, "busy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			status, body := publicError(c.err)
			if status != c.status || body.Code != c.code || body.Message != c.msg {
				t.Fatalf("publicError = %d %s %q, want %d %s %q", status, body.Code, body.Message, c.status, c.code, c.msg)
			}
			for _, leak := range []string{"db.internal", "5432", "/var/lib", "boom"} {
				if strings.Contains(body.Message, leak) {
					t.Fatalf("message %q carries %q", body.Message, leak)
				}
			}
			for _, code := range []rein.Code{rein.CodeUnauthenticated, rein.CodeNotFound, rein.CodeInvalidArgument, rein.CodeSessionBusy,
				rein.CodeConflict, rein.CodeUnavailable, rein.CodeTooLarge, rein.CodeTooManyRequests, rein.CodeInternal} {
				if strings.Contains(body.Message, string(code)+":") {
					t.Fatalf("message %q repeats the code %s", body.Message, code)
				}
			}
		})
	}
	if _, body := publicError(&rein.Error{Code: rein.CodeSessionBusy, Message: "busy", RunID: "run_1"}); body.RunID != "run_1" {
		t.Fatalf("session_busy lost its run_id: %+v", body)
	}
}

func TestStreamLimitDefaults(t *testing.T) {
	t.Parallel()
	if l := newStreamLimit(0); l.max != DefaultMaxStreamsPerOwner {
		t.Fatalf("0 → cap %d, want %d", l.max, DefaultMaxStreamsPerOwner)
	}
	l := newStreamLimit(-1)
	for range 5000 {
		if !l.acquire("alice") {
			t.Fatal("a negative cap refused a stream")
		}
	}
	l = newStreamLimit(1)
	if !l.acquire("alice") || l.acquire("alice") {
		t.Fatal("cap 1 did not hold")
	}
	l.release("alice")
	if len(l.n) != 0 || !l.acquire("alice") {
		t.Fatalf("release did not free the owner's slot: %v", l.n)
	}
}
