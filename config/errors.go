package config

import (
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration file, read like a compiler's:
//
//	rein.yaml:7: agents.default.tools[2]: "calc_*" matches no tool ...
type Error struct {
	File string
	// Line is 1-based, and always set: a problem the YAML parser could
	// not place is put on the line where parsing stopped, or line 1.
	Line int
	// Reason says what is wrong; it starts with the path of the
	// offending key when there is one, and is a single line.
	Reason string
	// Err is the error of another package the reason was made from (that
	// of Options.CheckModel), for errors.Is; nil otherwise.
	Err error
}

// Error returns "FILE:LINE: REASON".
func (e *Error) Error() string {
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Reason
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Errors are all the problems found in one file, in file order. Parse and
// Load return it (never empty) for any problem in a file's content, so a
// user fixes them in one go; errors.As finds each *Error.
type Errors []*Error

// Error returns one Error per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sorted returns the problems in file order without repeats (a value
// reached through several YAML aliases is reported once per path, but an
// anchored mapping checked twice must not say the same thing twice), or nil.
func (es Errors) sorted() error {
	if len(es) == 0 {
		return nil
	}
	slices.SortStableFunc(es, func(a, b *Error) int { return a.Line - b.Line })
	type key struct {
		line   int
		reason string
	}
	seen := make(map[key]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if k := (key{e.Line, e.Reason}); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

// oneLine keeps a reason on one line, whatever an outside error says.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}
