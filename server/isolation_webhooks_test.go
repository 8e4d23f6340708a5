package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// aliceDelivery gives alice a failed webhook delivery of her session's
// first event, straight through the store's outbox (the isolation stack
// runs no dispatcher), and returns its id.
func aliceDelivery(t *testing.T, s *stack, sid string) string {
	t.Helper()
	ob, ok := s.st.(store.Outbox)
	if !ok {
		t.Fatal("the isolation stack's store keeps no outbox")
	}
	ctx := context.Background()
	const dest = "https://hooks.example/alice"
	key := rein.SessionKey{Owner: "alice", ID: sid}
	ds := []*store.Delivery{{Seq: 1, Type: "user.supplement", Body: []byte(`{"seq":1}`)}}
	if err := ob.EnqueueDeliveries(ctx, key, dest, 0, 1, ds); err != nil {
		t.Fatal(err)
	}
	claimed, err := ob.ClaimDeliveries(ctx, dest, "test", time.Minute, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if _, err := ob.RecordAttempt(ctx, claimed[0].ID, claimed[0].Claim, store.Attempt{Error: "answered 500", GiveUp: true}); err != nil {
		t.Fatal(err)
	}
	return ds[0].ID
}

// webhookCases: bob's list holds none of alice's deliveries, and retrying
// hers is answered as retrying a random id (404), leaving hers failed.
func webhookCases(t *testing.T, m *matrix, a aliceIDs) map[string]func() {
	stillFailed := func() {
		t.Helper()
		d, err := m.s.st.(store.Outbox).GetDelivery(context.Background(), "alice", a.delivery)
		if err != nil || d.Status != store.DeliveryFailed || d.Attempts != 1 {
			t.Fatalf("alice's delivery after bob: %+v, %v", d, err)
		}
	}
	return map[string]func(){
		"GET /api/webhooks/deliveries": func() {
			for _, q := range []string{"", "?status=failed", "?status=pending&limit=1", "?after=" + a.delivery} {
				r := m.send(bob, request{method: "GET", path: "/api/webhooks/deliveries" + q})
				if r.status != 200 || len(r.json(t)["deliveries"].([]any)) != 0 {
					t.Fatalf("bob lists deliveries%s: %d %s", q, r.status, r.body)
				}
				m.noLeak("bob's deliveries", r)
			}
			if r := m.send("", request{method: "GET", path: "/api/webhooks/deliveries"}); r.status != 401 {
				t.Fatalf("deliveries without a token: %d %s", r.status, r.body)
			}
			// Alice sees hers.
			if r := m.s.do("GET", "/api/webhooks/deliveries?status=failed", alice, nil); r.status != 200 || len(r.json(t)["deliveries"].([]any)) != 1 {
				t.Fatalf("alice lists her failed deliveries: %d %s", r.status, r.body)
			}
			stillFailed()
		},
		"POST /api/webhooks/deliveries/{id}/retry": func() {
			m.pair("retry alice's delivery", a.delivery, func(x, _ string) request {
				return request{method: "POST", path: "/api/webhooks/deliveries/" + x + "/retry"}
			})
			stillFailed()
		},
	}
}
