package server

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// tokensErr is what every ParseTokens error looks like: the file's name,
// then a line number when the problem is on a line.
var tokensErr = regexp.MustCompile(`^tokens\.txt(?::([1-9][0-9]*))?: \S`)

// FuzzParseTokens: any bytes as a tokens file. ParseTokens never panics;
// an error names the file and, when it has one, a line that exists. What it
// accepts is a non-empty set of pairs, each written on a line of the file,
// each a token a client can send in an Authorization header; the server
// accepts the set, and presenting each token authenticates its owner.
func FuzzParseTokens(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := ParseTokens("tokens.txt", bytes.NewReader(data))
		if err != nil {
			m := tokensErr.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("error does not name the file: %q", err)
			}
			if m[1] != "" {
				n, _ := strconv.Atoi(m[1])
				if lines := bytes.Count(data, []byte("\n")) + 1; n > lines {
					t.Fatalf("error names line %d of a file of %d lines: %q", n, lines, err)
				}
			}
			if tokens != nil {
				t.Fatal("tokens returned with an error")
			}
			return
		}
		if len(tokens) == 0 {
			t.Fatal("no error, and no tokens: that would be single-user mode")
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(data), "\n") {
			lines[strings.Join(strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "\uFEFF")), " ")] = true
		}
		for tok, owner := range tokens {
			if !lines[tok+" "+owner] {
				t.Fatalf("pair %q %q is on no line of the file", tok, owner)
			}
			for _, s := range []string{tok, owner} {
				if !sendable(s) {
					t.Fatalf("accepted %q, which cannot travel in an HTTP header", s)
				}
			}
		}
		a, err := newAuthenticator(tokens)
		if err != nil {
			t.Fatalf("the server refuses what the parser accepted: %v", err)
		}
		for tok, owner := range tokens {
			if got, ok := a.owner("Bearer " + tok); !ok || got != owner {
				t.Fatalf("token %q authenticates %q %v, want %q", tok, got, ok, owner)
			}
		}
	})
}

// sendable reports whether s can be a word of an HTTP header value: no
// control bytes (RFC 9110 field values refuse them; net/http answers 400),
// no space, and no byte-order mark (an editor's, never part of a token).
// Other bytes above 0x7f are obs-text, which a header may carry.
func sendable(s string) bool {
	if s == "" || strings.HasPrefix(s, "\uFEFF") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return !strings.ContainsFunc(s, unicode.IsSpace)
}

// TestParseTokensControlCharactersAndBOM: the two mistakes FuzzParseTokens
// found or suggested. A control character in a token (or owner) is an
// error naming the line — such a token could never be sent — and a
// byte-order mark at the start of a line (an editor's, or one of each file
// joined into this one) is not part of the token.
func TestParseTokensControlCharactersAndBOM(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"tok-a alice\nt\x00k bob\n": `tokens.txt:2: a token or owner holds the control character '\x00'`,
		"tok\x01 alice\n":           `tokens.txt:1: a token or owner holds the control character '\x01'`,
		"tok alice\x7f\n":           `tokens.txt:1: a token or owner holds the control character '\x7f'`,
		"tok \uFEFFalice\n":         `tokens.txt:1: a token or owner starts with a byte-order mark (U+FEFF), which no client sends`,
	} {
		if _, err := ParseTokens("tokens.txt", strings.NewReader(text)); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", text, err, want)
		}
	}
	got, err := ParseTokens("tokens.txt", strings.NewReader("\uFEFFtok-a alice\n\uFEFF# joined\n\uFEFFtok-b bob\n  \uFEFFtok-c carol\n"))
	if err != nil || len(got) != 3 || got["tok-a"] != "alice" || got["tok-b"] != "bob" || got["tok-c"] != "carol" {
		t.Fatalf("tokens %q, %v", got, err)
	}
}
