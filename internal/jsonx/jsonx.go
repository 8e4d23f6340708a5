// Package jsonx checks and writes JSON exactly as encoding/json does, for
// the few operations every event pays for: checking a payload is JSON
// (each append, each event a stream sends) and writing a string (each
// payload the runtime builds). encoding/json's scanner calls a function per
// byte and its encoder goes through reflection; on a run of a few
// microseconds that was a tenth of the cost. The results are the same,
// byte for byte and verdict for verdict: the fuzz tests hold these
// functions to encoding/json's.
package jsonx

import (
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects encoding/json
// accepts: deeper input is not valid there, so it is not valid here.
const maxDepth = 10000

// Valid reports whether b is one JSON value, optionally surrounded by
// white space — what encoding/json.Valid reports. Like encoding/json, it
// does not check that strings are valid UTF-8 (decoding replaces bad
// bytes).
func Valid(b []byte) bool {
	// The open containers, innermost last: '{' or '['. Most payloads nest
	// a few levels, which the array holds without allocating.
	var inline [32]byte
	open := inline[:0]
	i := space(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(open) >= maxDepth {
				return false
			}
			i = space(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				i++
				break
			}
			open = append(open, c)
			if c == '{' {
				if i = member(b, i); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = str(b, i); i < 0 {
				return false
			}
		case 't':
			if i = word(b, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = word(b, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = word(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = number(b, i); i < 0 {
				return false
			}
		}
		// A value ended before i: close what it ends, or go on to the
		// next element.
		for {
			i = space(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = space(b, i+1)
			if top == '{' {
				if i = member(b, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// member reads an object member's key and colon at i (after white space)
// and returns where its value starts (after white space), or -1.
func member(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = str(b, i); i < 0 {
		return -1
	}
	i = space(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return space(b, i+1)
}

func space(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str reads the string that starts at b[i] (a quote) and returns the
// index after its closing quote, or -1.
func str(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		case c < 0x20:
			return -1
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// word reads the literal w at b[i] and returns the index after it, or -1.
func word(b []byte, i int, w string) int {
	if len(b)-i < len(w) || string(b[i:i+len(w)]) != w {
		return -1
	}
	return i + len(w)
}

// number reads the number at b[i] and returns the index after it, or -1:
// an optional minus, 0 or digits not starting with 0, then optionally a
// fraction and an exponent, each with at least one digit.
func number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// AppendString appends s as a JSON string, as encoding/json.Marshal writes
// one: quote, backslash and control characters escaped (\b, \f, \n, \r and
// \t by name, the others as \u00XX), <, > and & escaped for HTML, U+2028
// and U+2029 escaped, and each byte of invalid UTF-8 replaced by \ufffd.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	// done: s[:done] is already in b.
	done := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if !plain[c] {
				b = append(b, s[done:i]...)
				b = appendEscaped(b, c)
				done = i + 1
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[done:i]...)
			b = append(b, `\ufffd`...)
			done = i + n
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[done:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xF])
			done = i + n
		}
		i += n
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}

// appendEscaped appends the escape of the ASCII byte c.
func appendEscaped(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

const hexDigits = "0123456789abcdef"

// plain marks the ASCII bytes written as they are.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()
