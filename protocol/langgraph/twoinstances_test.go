package langgraph_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/postgres"
)

// shared is a store two test servers share: each server's cleanup closes
// its store, so only the test closes this one.
type shared struct{ store.Store }

func (shared) Close() error { return nil }

// TestTwoInstances: two instances share a PostgreSQL store; a run that A
// accepted and executes is joined on B (runs.joinStream from its start)
// and cancelled on B, and both read its end. Nothing of a run lives in an
// instance's memory.
func TestTwoInstances(t *testing.T) {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	schema := fmt.Sprintf("langgraph_test_%d", time.Now().UnixNano())
	st, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	script := protocoltest.WriteScript(t)
	instance := func(name string) *driver {
		srv := reintest.NewServer(t, reintest.ServerOptions{
			Script: script, Store: shared{st},
			Tokens:    map[string]string{"tok-alice": "alice"},
			Configure: func(c *sessions.Config) { c.Instance = name },
			Protocols: func(svc *sessions.Service) []protocol.Mount {
				return []protocol.Mount{langgraph.Mount(svc, langgraph.Options{})}
			},
		})
		return &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}}
	}
	a, b := instance("a"), instance("b")
	id, err := a.CreateSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	run, err := a.Send(ctx, "alice", id, "long on a")
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.do(ctx, "alice", http.MethodGet, "/threads/"+id+"/runs/"+run+"/stream?stream_mode=updates", nil, map[string]string{"Last-Event-ID": "-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	st2 := newStream(res)
	// B streams A's run up to its tool call.
	for {
		f, err := st2.frame()
		if err != nil {
			t.Fatalf("B's stream ended before the tool call: %v", err)
		}
		if f.event == "updates" && strings.Contains(string(f.data), `"sleep"`) {
			break
		}
	}
	key := rein.SessionKey{Owner: "alice", ID: id}
	if rec, err := b.srv.Service.GetRun(ctx, key, run); err != nil || rec.Instance != "a" {
		t.Fatalf("the run is executed by %q (%v), want instance a", rec.Instance, err)
	}
	if err := b.json(ctx, "alice", http.MethodPost, "/threads/"+id+"/runs/"+run+"/cancel?wait=1&action=interrupt", nil, nil); err != nil {
		t.Fatalf("B's cancel of A's run: %v", err)
	}
	// B's stream ends with the run.
	for {
		if _, err := st2.frame(); err != nil {
			break
		}
	}
	for name, d := range map[string]*driver{"a": a, "b": b} {
		var got struct{ Status string }
		if err := d.json(ctx, "alice", http.MethodGet, "/threads/"+id+"/runs/"+run, nil, &got); err != nil || got.Status != "interrupted" {
			t.Errorf("%s reads the run %+v (%v), want interrupted", name, got, err)
		}
	}
}
