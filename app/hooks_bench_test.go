package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
)

// BenchmarkRunWithStalledWebhook is the latency a webhook adds to a run:
// a scripted run end to end (message in, run ended) with no webhook, and with
// a webhook of every event whose receiver never answers (each attempt
// waits out its 10 s). Compare the two ns/op of one invocation
// (-count alternates them).
func BenchmarkRunWithStalledWebhook(b *testing.B) {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer stall.Close()
	for _, c := range []struct{ name, config string }{
		{"none", ""},
		{"stalled", "webhooks:\n  - url: " + stall.URL + "\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			m, err := scripted.Parse("bench.yaml", []byte("rules:\n  - match: \".*\"\n    steps:\n      - text: \"ok\"\n"))
			if err != nil {
				b.Fatal(err)
			}
			rt, err := app.Open(ctx, app.Options{LookupEnv: noEnv, ConfigData: []byte(c.config),
				Models: map[string]model.Model{"s": m}, Model: "s"})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			if err := rt.Start(ctx); err != nil {
				b.Fatal(err)
			}
			svc := rt.Service()
			sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: "hello"})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := res.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
