package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// TestServeNeverLogsSecrets runs rein serve on PostgreSQL with a password in
// its DSN, tokens, and a provider API key in its environment, drives a whole
// session through it — a message streamed, a stop, failing requests, a
// model request the provider refuses — and reads its log in both formats:
// the DSN shows redacted, and no password, token or key shows at all.
func TestServeNeverLogsSecrets(t *testing.T) {
	base := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if base == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	const (
		password = "s3cretPW"
		apiKey   = "sk-test-SECRET"
		tokAlice = "tok-alice-0123456789abcdef"
		tokBob   = "bobtok7" // short: warned about, by owner only
		tokWrong = "wrong-token-XYZ"
	)
	dsn := secretDSN(t, base, password)

	// An OpenAI-compatible provider that refuses the key.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
	}))
	defer upstream.Close()

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	cfg := filepath.Join(dir, "rein.yaml")
	if err := os.WriteFile(tokens, []byte(tokAlice+" alice\n"+tokBob+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("agents:\n  remote:\n    model: \"openai:gpt-test\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"REIN_STORE":      dsn,
		"OPENAI_API_KEY":  apiKey,
		"OPENAI_BASE_URL": upstream.URL + "/v1",
	}
	for _, format := range []string{"text", "json"} {
		s := startServe(t, env, "--addr", "127.0.0.1:0", "--model", "scripted:testdata/client-script.yaml",
			"--tokens", tokens, "--config", cfg, "--workspace", filepath.Join(dir, "ws"),
			"--log-format", format, "--log-level", "debug")
		driveSession(t, s.url, tokAlice, tokWrong)
		if code := s.shutdown(t); code != 0 {
			t.Fatalf("%s: exit %d:\n%s", format, code, s.stderr)
		}
		log := s.stderr.String()
		for _, secret := range []string{password, apiKey, tokAlice, tokBob, tokWrong} {
			if strings.Contains(log, secret) {
				t.Errorf("%s log shows %q:\n%s", format, secret, log)
			}
		}
		for _, want := range []string{"postgres:xxxxx@", "owner", "bob", "short token", "status=401", "run failed", "Incorrect API key provided"} {
			if format == "json" && want == "status=401" {
				want = `"status":401`
			}
			if !strings.Contains(log, want) {
				t.Errorf("%s log lacks %q:\n%s", format, want, log)
			}
		}
	}
}

// secretDSN is the test database's DSN with a password (trust
// authentication accepts any) and a fresh schema of its own.
func secretDSN(t *testing.T, base, password string) string {
	t.Helper()
	ctx := t.Context()
	schema := fmt.Sprintf("cli_secrets_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = conn.Close(context.Background())
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	user := "postgres"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// driveSession runs a session through its paces: a message streamed and
// stopped, a run that fails at its provider, and requests that fail.
func driveSession(t *testing.T, url, token, wrongToken string) {
	t.Helper()
	ctx := ctxT(t)
	c := client.New(url, client.WithToken(token))
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, long.RunID))
	if r, err := c.StopRun(ctx, sess.ID, long.RunID, rein.StopCancel); err != nil || !r.Accepted {
		t.Fatalf("stop: %+v %v", r, err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, long.RunID))

	remote, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.SendMessage(ctx, remote.ID, client.Message{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	var p rein.RunCompletedPayload
	if err := waitEvent(t, c, remote.ID, isEvent(rein.EventRunCompleted, r.RunID)).DecodePayload(&p); err != nil || p.Status != rein.StatusFailed {
		t.Fatalf("the provider's refusal: %+v %v", p, err)
	}

	if _, err := client.New(url, client.WithToken(wrongToken)).ListSessions(ctx); rein.CodeOf(err) != rein.CodeUnauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := c.GetSession(ctx, "ses_nope"); rein.CodeOf(err) != rein.CodeNotFound {
		t.Fatalf("missing session: %v", err)
	}
	if _, err := c.PostEvents(ctx, sess.ID, []client.EventInput{{Type: "nonsense"}}); rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("bad event: %v", err)
	}
}

// TestStoreErrorsAreRedacted: a store that does not open is reported with
// its DSN redacted, whether the database is down (exit 1) or the DSN does
// not parse (exit 2).
func TestStoreErrorsAreRedacted(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"migrate", "--store", "postgres://u:s3cretPW@127.0.0.1:1/x?sslmode=disable&connect_timeout=5"}, exitFailed, "rein: --store postgres://u:xxxxx@127.0.0.1:1/x?sslmode=disable&connect_timeout=5: "},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--store", "postgres://u:s3cretPW@127.0.0.1:1/x?sslmode=disable&connect_timeout=5"}, exitFailed, "rein: --store postgres://u:xxxxx@127.0.0.1:1/x?sslmode=disable&connect_timeout=5: "},
		{[]string{"migrate", "--store", "postgres://u:s3cretPW@127.0.0.1:notaport/x"}, exitUsage, "rein: --store: "},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--store", "postgres://u:s3cretPW@127.0.0.1:notaport/x"}, exitUsage, "rein: --store: "},
	} {
		code, _, errs := run(t, "", nil, c.args...)
		if code != c.code || !strings.HasPrefix(errs, c.want) || strings.Contains(errs, "s3cretPW") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and %s", c.args, code, errs, c.code, c.want)
		}
	}
}
