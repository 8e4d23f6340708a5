package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strings"
)

// LocalOwner is the owner of every request in single-user mode (no tokens
// configured).
const LocalOwner = "local"

// LoadTokens reads a tokens file (docs/cli.md): see ParseTokens.
func LoadTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	return ParseTokens(path, f)
}

// ParseTokens reads "TOKEN OWNER" pairs, one per line, separated by spaces
// or tabs. Blank lines and lines starting with '#' (after leading space)
// are skipped, and so is a byte-order mark at the start of a line. A
// malformed line (a control character in a word included), a repeated
// token or a file with no token at all is an error naming the file (name)
// and the line, so a mistake can never quietly leave the server open or
// lock a user out.
func ParseTokens(name string, r io.Reader) (map[string]string, error) {
	tokens := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		// A byte-order mark is an editor's (at the start of each file that
		// was joined into this one, perhaps after indentation), never part
		// of a token.
		text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "\uFEFF"))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"TOKEN OWNER\", got %d fields", name, line, len(fields))
		}
		// A token travels in an HTTP header, which cannot carry a control
		// character: such a token could never be presented.
		for _, w := range fields {
			if i := strings.IndexFunc(w, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
				return nil, fmt.Errorf("%s:%d: a token or owner holds the control character %q", name, line, w[i])
			}
			if strings.HasPrefix(w, "\uFEFF") {
				return nil, fmt.Errorf("%s:%d: a token or owner starts with a byte-order mark (U+FEFF), which no client sends", name, line)
			}
		}
		tok, owner := fields[0], fields[1]
		if _, dup := tokens[tok]; dup {
			return nil, fmt.Errorf("%s:%d: token repeated (each token maps to one owner)", name, line)
		}
		tokens[tok] = owner
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s: no tokens (an empty tokens file would mean single-user mode; omit --tokens for that)", name)
	}
	return tokens, nil
}

// authenticator maps bearer tokens to owners.
//
// Tokens are kept as SHA-256 digests and a presented token is compared
// against every one of them with subtle.ConstantTimeCompare, without an
// early exit: the time an answer takes says nothing about how much of a
// token matched, how long the real tokens are, or which one matched.
type authenticator struct {
	digests [][sha256.Size]byte
	owners  []string
}

func newAuthenticator(tokens map[string]string) (*authenticator, error) {
	a := &authenticator{}
	for tok, owner := range tokens {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("server: a token must be non-empty and without spaces")
		}
		if owner == "" {
			return nil, fmt.Errorf("server: token for an empty owner")
		}
		a.digests = append(a.digests, sha256.Sum256([]byte(tok)))
		a.owners = append(a.owners, owner)
	}
	return a, nil
}

// singleUser reports whether no tokens are configured.
func (a *authenticator) singleUser() bool { return len(a.digests) == 0 }

// owner returns the owner of the request's bearer token, or false.
func (a *authenticator) owner(header string) (string, bool) {
	if a.singleUser() {
		return LocalOwner, true
	}
	const prefix = "bearer "
	if len(header) <= len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", false
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(header[len(prefix):])))
	match := -1
	for i := range a.digests {
		if subtle.ConstantTimeCompare(d[:], a.digests[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return a.owners[match], true
}

// BearerAuth returns the check the server applies to an Authorization
// header, for a handler mounted beside the server's own routes (a
// protocol adapter): the owner of the header's bearer token, or false;
// with no tokens every request is LocalOwner's. The same constant-time
// comparison as the server's.
func BearerAuth(tokens map[string]string) (func(authorization string) (owner string, ok bool), error) {
	a, err := newAuthenticator(tokens)
	if err != nil {
		return nil, err
	}
	return a.owner, nil
}
