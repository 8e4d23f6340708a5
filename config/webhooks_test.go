package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/config"
)

func TestWebhooks(t *testing.T) {
	cfg, err := config.Parse("rein.yaml", []byte(`webhooks:
  - url: "https://hooks.example.com/rein"
    events: ["session.run_completed", "agent.*"]
    secret_env: REIN_HOOK_SECRET
    retry_for: 30s
  - url: http://127.0.0.1:9000/all
`), options())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2", len(cfg.Webhooks))
	}
	a, b := cfg.Webhooks[0], cfg.Webhooks[1]
	if a.URL != "https://hooks.example.com/rein" || !slices.Equal(a.Events, []string{"session.run_completed", "agent.*"}) ||
		a.SecretEnv != "REIN_HOOK_SECRET" || a.RetryFor != 30*time.Second || a.Line != 2 {
		t.Fatalf("first webhook = %+v", a)
	}
	if b.URL != "http://127.0.0.1:9000/all" || b.Events != nil || b.SecretEnv != "" || b.RetryFor != config.DefaultRetryFor || b.Line != 6 {
		t.Fatalf("second webhook = %+v", b)
	}
}

func TestWebhookRejections(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		line       int
		reason     string
	}{
		{"not a list", "webhooks:\n  url: https://a.example\n", 2, "must be a list"},
		{"ftp url", "webhooks:\n  - url: ftp://a.example/x\n", 2, "is not an http or https URL"},
		{"no url", "webhooks:\n  - events: [\"agent.*\"]\n", 2, "needs url"},
		{"bad glob", "webhooks:\n  - url: https://a.example\n    events: [\"agent.[\"]\n", 3, "is not a valid glob"},
		{"bad duration", "webhooks:\n  - url: https://a.example\n    retry_for: forever\n", 3, "is not a duration"},
		{"zero duration", "webhooks:\n  - url: https://a.example\n    retry_for: 0s\n", 3, "longer than zero"},
		{"unknown key", "webhooks:\n  - url: https://a.example\n    secret: x\n", 3, "secret"},
		{"same url twice", "webhooks:\n  - url: https://a.example\n  - url: https://a.example\n", 3, "already a webhook (line 2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse("rein.yaml", []byte(c.yaml), options())
			var es config.Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("error = %v, want one problem", err)
			}
			if e := es[0]; e.Line != c.line || !strings.Contains(e.Error(), c.reason) || !strings.HasPrefix(e.Error(), "rein.yaml:") {
				t.Fatalf("error = %v, want line %d and %q", e, c.line, c.reason)
			}
		})
	}
}
