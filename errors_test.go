package rein_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// TestErrorfKeepsCausesOut: a %w operand is the cause, reachable by
// errors.Is and errors.As and written by Error for the log, and none of
// its text is in Message, the part a client reads — unless it is a Rein
// error, whose own message is public.
func TestErrorfKeepsCausesOut(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp db.internal.example:5432 as rein:s3cret: connection refused")
	inner := rein.InvalidArgument("text", "text is empty")
	malformed := "oops: %w %" // a variable: vet refuses it as a constant
	for _, c := range []struct {
		name  string
		err   *rein.Error
		msg   string
		cause error // what errors.Is must find
	}{
		{"cause at the end", rein.Errorf(rein.CodeUnavailable, "store unreachable: %w", secret), "store unreachable", secret},
		{"cause with operands before it", rein.Errorf(rein.CodeConflict, "write %s (%d rows): %w", "runs", 3, secret), "write runs (3 rows)", secret},
		{"cause in brackets", rein.Errorf(rein.CodeConflict, "read failed (%w)", secret), "read failed", secret},
		{"cause alone", rein.Errorf(rein.CodeInvalidArgument, "%w", secret), "", secret},
		{"cause mid-sentence", rein.Errorf(rein.CodeConflict, "%w happened", secret), "", secret},
		{"cause, then an operand", rein.Errorf(rein.CodeConflict, "%w for %s", secret, "x"), "", secret},
		{"a Rein cause shows its message", rein.Errorf(rein.CodeInvalidArgument, "history message %d: %w", 2, inner), "history message 2: text is empty", inner},
		{"a Rein cause mid-sentence", rein.Errorf(rein.CodeInvalidArgument, "%w in message 2", inner), "text is empty in message 2", inner},
		{"a Rein cause wrapping a secret", rein.Errorf(rein.CodeNotFound, "lookup: %w", rein.Errorf(rein.CodeNotFound, "session not found: %w", secret)), "lookup: session not found", secret},
		{"an internal Rein cause", rein.Errorf(rein.CodeConflict, "apply: %w", rein.Errorf(rein.CodeInternal, "boom in %s", "/var/lib/rein.db")), "apply", rein.ErrInternal},
		{"a wrapped Rein cause is foreign", rein.Errorf(rein.CodeConflict, "apply: %w", fmt.Errorf("tx: %w", inner)), "apply", inner},
		{"two causes", rein.Errorf(rein.CodeConflict, "apply: %w: %w", inner, secret), "apply: text is empty", secret},
		{"a foreign cause before a Rein one", rein.Errorf(rein.CodeConflict, "apply: %w: %w", secret, inner), "", inner},
		{"two foreign causes at the end", rein.Errorf(rein.CodeConflict, "apply: %w: %w", secret, errors.New("also /var/lib")), "apply", secret},
		{"no cause", rein.Errorf(rein.CodeNotFound, "session %q not found", "ses_1"), `session "ses_1" not found`, nil},
		{"percent sign", rein.Errorf(rein.CodeConflict, "100%% full: %w", secret), "100% full", secret},
		{"explicit indexes and a cause", rein.Errorf(rein.CodeConflict, "%[2]s then %[1]s: %[3]w", "a", "b", secret), "", secret},
		{"explicit indexes", rein.Errorf(rein.CodeConflict, "%[2]s then %[1]s", "a", "b"), "b then a", nil},
		{"a malformed verb and a cause", rein.Errorf(rein.CodeConflict, malformed, secret), "", secret},
		{"star width", rein.Errorf(rein.CodeConflict, "[%*d]: %w", 4, 7, secret), "[   7]", secret},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.err.Message != c.msg {
				t.Fatalf("Message = %q, want %q", c.err.Message, c.msg)
			}
			for _, leak := range []string{"s3cret", "db.internal", "5432", "/var/lib", "boom"} {
				if strings.Contains(c.err.Message, leak) {
					t.Fatalf("Message %q carries %q", c.err.Message, leak)
				}
			}
			if c.cause == nil {
				if c.err.Err != nil {
					t.Fatalf("Err = %v without a %%w", c.err.Err)
				}
				return
			}
			if !errors.Is(c.err, c.cause) {
				t.Fatalf("errors.Is(%v, %v) = false", c.err, c.cause)
			}
			if c.cause == secret && !strings.Contains(c.err.Error(), secret.Error()) {
				t.Fatalf("Error() = %q: the log loses the cause", c.err.Error())
			}
		})
	}
}

// TestErrorfFormatsAsFmt: without a %w, the message is fmt.Sprintf's,
// malformed formats included.
func TestErrorfFormatsAsFmt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		format string
		args   []any
	}{
		{"plain", nil},
		{"%s and %q and %d", []any{"a", "b", 3}},
		{"%-5s|%05.1f|%x|%+v", []any{"ab", 2.5, 255, struct{ A int }{1}}},
		{"%[2]*[1]d", []any{12, 5}},
		{"%.*f", []any{2, 3.14159}},
		{"missing %s %d", []any{"one"}},
		{"trailing %", nil},
		{"%!", nil},
		{"100%%", nil},
		{"%v", []any{nil}},
		{"%[3]d", []any{1}},
	} {
		want := fmt.Sprintf(c.format, c.args...)
		if got := rein.Errorf(rein.CodeConflict, c.format, c.args...).Message; got != want {
			t.Errorf("Errorf(%q).Message = %q, want %q", c.format, got, want)
		}
	}
}

// TestErrorText: Error, for logs, names the code, the message, the field
// and the cause, and skips an empty message.
func TestErrorText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{rein.Errorf(rein.CodeUnavailable, "store unreachable: %w", errors.New("dial tcp")), "unavailable: store unreachable: dial tcp"},
		{rein.Errorf(rein.CodeInvalidArgument, "%w", errors.New("bad name")), "invalid_argument: bad name"},
		{rein.InvalidArgument("text", "text is empty"), "invalid_argument: text is empty (text)"},
		{rein.ErrNotFound, "not_found"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

// FuzzErrorf: whatever the format, a foreign cause's text never reaches
// Message and errors.Is finds it; a format without %w that uses every
// operand reads as fmt.Sprintf's.
func FuzzErrorf(f *testing.F) {
	for _, s := range []string{"store unreachable: %w", "%w happened", "%s: %d: %w", "%[2]s %[1]w", "%*d %w", "%.*f: %w", "100%%: %w", "%", "%!", "%[9]w", "(%w)", "%w: %w", "%v %q"} {
		f.Add(s)
	}
	secret := errors.New("SECRET-dial-tcp")
	f.Fuzz(func(t *testing.T, format string) {
		// The cause's property holds for %w; another verb given an error
		// prints it, as fmt does. So every operand here is the cause, and
		// formats with other verbs (that would print it) are for the
		// second property.
		causes := []any{secret, secret, secret}
		if onlyWrapVerbs(format) {
			e := rein.Errorf(rein.CodeConflict, format, causes...)
			if strings.Contains(e.Message, "SECRET") {
				t.Fatalf("Errorf(%q).Message = %q carries the cause", format, e.Message)
			}
			if errors.Is(fmt.Errorf(format, causes...), secret) && !errors.Is(e, secret) {
				t.Fatalf("Errorf(%q): errors.Is lost the cause %v", format, e.Err)
			}
		}
		args := []any{"a", 2, 1.5}
		// fmt lists unused operands (%!(EXTRA …)); Errorf leaves them out.
		if want := fmt.Sprintf(format, args...); !strings.Contains(format, "w") && !strings.Contains(want, "%!(EXTRA ") {
			if got := rein.Errorf(rein.CodeConflict, format, args...).Message; got != want {
				t.Fatalf("Errorf(%q).Message = %q, want fmt's %q", format, got, want)
			}
		}
	})
}

// onlyWrapVerbs reports whether every verb of format is a bare %w or %%
// (fmt reads flags before a '%' its own way).
func onlyWrapVerbs(format string) bool {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		if i+1 == len(format) || (format[i+1] != 'w' && format[i+1] != '%') {
			return false
		}
		i++
	}
	return true
}
