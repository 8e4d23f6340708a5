package backend

import (
	"regexp"
	"strings"
)

// redacted replaces a password wherever Redact finds one.
const redacted = "xxxxx"

var (
	// A password given as a URL query parameter (libpq accepts
	// ?password=…).
	queryPassword = regexp.MustCompile(`([?&]password=)[^&#]*`)
	// A password in a key=value DSN, bare or single-quoted (with \'
	// escapes), with optional spaces around '='.
	keywordPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)
)

// Redact returns a store spec with any password in it replaced by
// "xxxxx", for logs and error messages: a PostgreSQL DSN in URL form
// (postgres://user:secret@host/db, or ?password=secret) or in key=value
// form (host=db password=secret). Other specs come back unchanged.
//
// It works on the text, not on a parsed DSN, so that a DSN too malformed
// to parse is redacted as well: that is the one most likely to end up in
// an error message.
func Redact(spec string) string {
	lower := strings.ToLower(spec)
	switch {
	case strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://"):
		return redactURL(spec)
	case strings.HasPrefix(lower, "sqlite:") || strings.HasPrefix(lower, "memory:"):
		return spec
	}
	return keywordPassword.ReplaceAllString(spec, "${1}"+redacted)
}

// redactURL redacts the password of the userinfo (up to the last '@'
// before the query, so that an unescaped '@' or '/' in the password is
// still covered) and of a password query parameter.
func redactURL(spec string) string {
	scheme := strings.Index(spec, "://") + len("://")
	rest := spec[scheme:]
	end := len(rest)
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		end = q
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		if colon := strings.Index(rest[:at], ":"); colon >= 0 {
			rest = rest[:colon+1] + redacted + rest[at:]
		}
	}
	return spec[:scheme] + queryPassword.ReplaceAllString(rest, "${1}"+redacted)
}
