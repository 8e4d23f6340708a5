package sessions_test

import (
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/storetest"
)

// SetSystem is one write: the override and its system.message commit
// together, so a failed write leaves neither.
func TestSetSystemIsOneWrite(t *testing.T) {
	t.Parallel()
	st := storetest.NewFaulty(memory.New())
	f := newFixture(t, st)
	key := f.newSession()
	ctx := t.Context()
	st.FailAt(1)
	if err := f.svc.SetSystem(ctx, key, "lost"); err == nil {
		t.Fatal("SetSystem succeeded through a failing write")
	}
	sess, err := st.GetSession(ctx, key)
	if err != nil || sess.System != nil {
		t.Fatalf("session after a failed SetSystem = %+v, %v; want no override", sess, err)
	}
	if evs := f.all(); len(evs) != 0 {
		t.Fatalf("a failed SetSystem logged %+v", evs)
	}
	st.FailAt(0)
	if err := f.svc.SetSystem(ctx, key, "kept"); err != nil {
		t.Fatal(err)
	}
	if n := st.Writes(); n != 1 {
		t.Fatalf("SetSystem made %d writes, want 1", n)
	}
	sess, err = st.GetSession(ctx, key)
	if err != nil || sess.System == nil || *sess.System != "kept" {
		t.Fatalf("session after SetSystem = %+v, %v", sess, err)
	}
	evs := f.all()
	var p rein.SystemMessagePayload
	if len(evs) != 1 || evs[0].Type != rein.EventSystemMessage || evs[0].DecodePayload(&p) != nil || p.Text != "kept" {
		t.Fatalf("log after SetSystem = %+v, want its one system.message", evs)
	}
}
