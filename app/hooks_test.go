package app_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/webhook"
)

// TestWebhooksDeliverRunEnds: a webhook of the configuration receives the
// run_completed of a run, signed with the secret its secret_env names.
func TestWebhooksDeliverRunEnds(t *testing.T) {
	ctx := testContext(t)
	got := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]byte("shh"), r.Header.Get("Rein-Signature"), body, time.Now(), time.Minute); err != nil {
			t.Errorf("signature: %v", err)
		}
		var e map[string]any
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		e["delivery_id"] = r.Header.Get("Rein-Delivery-Id")
		got <- e
	}))
	defer srv.Close()
	env := func(k string) (string, bool) {
		if k == "HOOK_SECRET" {
			return "shh", true
		}
		return "", false
	}
	rt, err := app.Open(ctx, app.Options{LookupEnv: env, ConfigData: []byte(`webhooks:
  - url: ` + srv.URL + `
    events: ["session.run_completed"]
    secret_env: HOOK_SECRET
`)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out := send(t, rt.Service(), "", "hello")
	select {
	case e := <-got:
		if e["type"] != "session.run_completed" || e["run_id"] != out.RunID || e["owner"] != "alice" ||
			!strings.HasPrefix(e["delivery_id"].(string), "dlv_") {
			t.Fatalf("delivered %v", e)
		}
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
}

// TestWebhookSecretMissing: a secret_env naming an unset variable stops
// Open with the webhook's line.
func TestWebhookSecretMissing(t *testing.T) {
	ctx := testContext(t)
	_, err := app.Open(ctx, app.Options{LookupEnv: noEnv, ConfigData: []byte("webhooks:\n  - url: https://a.example/hook\n    secret_env: NOPE\n")})
	var oe *app.OptionError
	var ce *config.Error
	if !errors.As(err, &oe) || oe.Option != "ConfigFile" || !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(err.Error(), "NOPE is not set") {
		t.Fatalf("error = %v", err)
	}
}
