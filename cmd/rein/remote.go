package main

// What the commands that talk to a server (chat, send, events, sessions,
// runs, stop, delete) share: --server and --token, and errors a person can
// act on.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// defaultServer is where the client commands look for `rein serve`.
const defaultServer = "http://127.0.0.1:8080"

// remote is a command's connection to a server.
type remote struct {
	fs     *flagSet
	server *string
	token  *string
	// base is the server's URL once connect has checked --server.
	base string
	c    *client.Client
}

// addRemote defines --server and --token on fs.
func addRemote(fs *flagSet) *remote {
	return &remote{
		fs:     fs,
		server: fs.String("server", defaultServer, "the Rein server: a `URL` such as http://127.0.0.1:8080, or HOST:PORT (http:// is assumed)"),
		token:  fs.String("token", "", "bearer `TOKEN` (none for a single-user server)"),
	}
}

// connect checks --server and makes the client.
func (r *remote) connect() error {
	base, err := serverURL(*r.server)
	if err != nil {
		return r.fs.invalid("server", "%v; use HOST:PORT or http(s)://HOST[:PORT], e.g. 127.0.0.1:8080 or https://rein.example.com", err)
	}
	r.base = base
	var opts []client.Option
	if *r.token != "" {
		opts = append(opts, client.WithToken(*r.token))
	}
	r.c = client.New(base, opts...)
	return nil
}

// serverURL turns a --server value into the server's base URL: a URL with
// scheme http or https and a host, or HOST:PORT, taken as http.
func serverURL(v string) (string, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return "", errors.New("no server address")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("not a server address (%v)", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("not a server address (scheme %q; the server speaks http or https)", u.Scheme)
	case u.Hostname() == "":
		return "", errors.New("not a server address (no host)")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("not a server address (a base URL has no user, query or fragment; give a token with --token)")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("not a server address (port %q)", p)
		}
	}
	if host := u.Hostname(); strings.ContainsAny(host, " \t") || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return "", fmt.Errorf("not a server address (host %q)", host)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// remoteError is a client error rephrased for people; it still matches
// what it wraps (errors.Is(err, rein.ErrSessionBusy)).
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// fail rephrases an error of a request to the server. session names the
// session the request was about ("": none), for not_found.
func (r *remote) fail(err error, session string) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		msg := clientMessage(ce)
		switch ce.Code {
		case rein.CodeUnauthenticated:
			if *r.token == "" {
				msg = "the server at " + r.base + " needs a token: give one with --token or REIN_TOKEN (unauthenticated)"
			} else {
				msg = "the server at " + r.base + " refused the token given by --token or REIN_TOKEN (unauthenticated)"
			}
		case rein.CodeNotFound:
			if session != "" {
				msg = "session " + session + " not found (not_found)"
			}
		case rein.CodeSessionBusy:
			msg = fmt.Sprintf("session %s is busy with run %s (session_busy)", session, ce.RunID)
		}
		return &remoteError{msg: msg, err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return &remoteError{msg: fmt.Sprintf("cannot reach the server at %s: %v (is `rein serve` running there?)", r.base, ue.Err), err: err}
	}
	return &remoteError{msg: fmt.Sprintf("%v (server %s)", err, r.base), err: err}
}

// ensureSession returns session, or creates a session and tells the user
// its id on stderr, so that the next command can continue it.
func (r *remote) ensureSession(ctx context.Context, session string, std stdio) (string, error) {
	if session != "" {
		return session, nil
	}
	s, err := r.c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		return "", r.fail(err, "")
	}
	fmt.Fprintf(std.err, "session %s\n", s.ID)
	return s.ID, nil
}
