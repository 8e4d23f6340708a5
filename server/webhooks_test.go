package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// TestWebhookDeliveriesAPI: the deliveries routes answer as documented —
// pages by id with a cursor, a status filter, a retry that makes a failed
// delivery pending — and refuse bad parameters with their param.
func TestWebhookDeliveriesAPI(t *testing.T) {
	t.Parallel()
	api := loadOpenAPI(t)
	s := newStack(t, options{tokens: map[string]string{"tok": "alice", "tok-bob": "bob"}})
	ob := s.st.(store.Outbox)
	ctx := context.Background()
	sid := s.createSession("tok")
	s.results("tok", sid, ev("user.supplement", map[string]any{"text": "a"}), ev("user.supplement", map[string]any{"text": "b"}),
		ev("user.supplement", map[string]any{"text": "c"}))
	const dest = "https://hooks.example/a"
	ds := []*store.Delivery{
		{Seq: 1, Type: "user.supplement", Body: []byte(`{}`)}, {Seq: 2, Type: "user.supplement", Body: []byte(`{}`)},
		{Seq: 3, Type: "user.supplement", Body: []byte(`{}`)}}
	if err := ob.EnqueueDeliveries(ctx, rein.SessionKey{Owner: "alice", ID: sid}, dest, 0, 3, ds); err != nil {
		t.Fatal(err)
	}
	head, err := ob.ClaimDeliveries(ctx, dest, "test", time.Minute, 0)
	if err != nil || len(head) != 1 {
		t.Fatalf("claim: %v %v", head, err)
	}
	if _, err := ob.RecordAttempt(ctx, head[0].ID, head[0].Claim, store.Attempt{Error: "answered 500 Internal Server Error", GiveUp: true}); err != nil {
		t.Fatal(err)
	}

	list := func(q string, want int) map[string]any {
		t.Helper()
		r := s.do("GET", "/api/webhooks/deliveries"+q, "tok", nil)
		if r.status != want {
			t.Fatalf("GET deliveries%s: %d %s", q, r.status, r.body)
		}
		api.check(t, "GET", "/api/webhooks/deliveries", r)
		return r.json(t)
	}
	first := list("?limit=2", 200)
	items := first["deliveries"].([]any)
	if len(items) != 2 || first["next"] == nil {
		t.Fatalf("first page: %v", first)
	}
	byID := map[string]map[string]any{}
	for _, page := range []map[string]any{first, list("", 200)} {
		for _, it := range page["deliveries"].([]any) {
			byID[it.(map[string]any)["id"].(string)] = it.(map[string]any)
		}
	}
	failed := byID[ds[0].ID]
	if failed["status"] != "failed" || failed["attempts"] != 1.0 || failed["last_error"] != "answered 500 Internal Server Error" ||
		failed["next_at"] != nil || failed["webhook"] != dest || failed["event_seq"] != 1.0 || failed["session_id"] != sid {
		t.Fatalf("failed delivery: %v", failed)
	}
	if p := byID[ds[1].ID]; p["status"] != "pending" || p["next_at"] == nil || p["last_error"] != nil {
		t.Fatalf("pending delivery: %v", p)
	}
	second := list("?limit=2&after="+first["next"].(string), 200)
	if n := len(second["deliveries"].([]any)); n != 1 || second["next"] != nil {
		t.Fatalf("second page: %v", second)
	}
	if f := list("?status=failed", 200)["deliveries"].([]any); len(f) != 1 || f[0].(map[string]any)["id"] != ds[0].ID {
		t.Fatalf("failed filter: %v", f)
	}
	if d := list("?status=delivered", 200)["deliveries"].([]any); len(d) != 0 {
		t.Fatalf("delivered filter: %v", d)
	}
	for q, param := range map[string]string{"?status=lost": "status", "?limit=0": "limit", "?limit=x": "limit"} {
		e := list(q, 400)["error"].(map[string]any)
		if e["code"] != "invalid_argument" || e["param"] != param {
			t.Fatalf("%s: %v", q, e)
		}
	}

	r := s.do("POST", "/api/webhooks/deliveries/"+ds[0].ID+"/retry", "tok", nil)
	api.check(t, "POST", "/api/webhooks/deliveries/{id}/retry", r)
	if r.status != 200 || r.json(t)["status"] != "pending" || r.json(t)["next_at"] == nil {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ tok, id string }{{"tok", "dlv_missing"}, {"tok-bob", ds[0].ID}} {
		r := s.do("POST", "/api/webhooks/deliveries/"+c.id+"/retry", c.tok, nil)
		api.check(t, "POST", "/api/webhooks/deliveries/{id}/retry", r)
		if r.status != 404 {
			t.Fatalf("retry %s as %s: %d %s", c.id, c.tok, r.status, r.body)
		}
	}
	if b := s.do("GET", "/api/webhooks/deliveries", "tok-bob", nil); b.status != 200 || len(b.json(t)["deliveries"].([]any)) != 0 {
		t.Fatalf("bob's list: %d %s", b.status, b.body)
	}
}
