//go:build linux

package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/sqlite"
)

// TestFullDiskRecoversWithLittleSpace fills the file system under a store
// (a 4 MiB tmpfs) until appends fail, gives back 2 MiB — far less than the
// ~40 MB the WAL may grow to between automatic checkpoints — and then
// appends several times more WAL than that: every append must succeed, the WAL
// being checkpointed and truncated instead of filling the freed space
// again, and the log must hold every acknowledged event once, in order.
// (Found by chaos/TestDiskFullSQLite: without it, the store never wrote
// again once its WAL had taken the returned space.)
func TestFullDiskRecoversWithLittleSpace(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("cannot mount a 4 MiB tmpfs for a full disk (%v): the test needs root or CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(dir, "rein.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := rein.SessionKey{Owner: "alice", ID: "ses_full"}
	if err := s.CreateSession(ctx, &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	acked := 0
	appendOne := func() error {
		p := fmt.Appendf(nil, `{"run_id":"run_1","step":1,"text":"delta %d"}`, acked)
		_, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{{Type: rein.EventMessageDelta, Payload: p}})
		if err == nil {
			acked++
		}
		return err
	}
	for range 100 {
		if err := appendOne(); err != nil {
			t.Fatalf("append before the disk fills: %v", err)
		}
	}

	// Fill the disk: appends fail with unavailable (the WAL may still
	// have room of its own for a while).
	ballast := filepath.Join(dir, "ballast")
	size := fillDisk(t, ballast)
	var full error
	for range 100000 {
		if full = appendOne(); full != nil {
			break
		}
	}
	if !errors.Is(full, rein.ErrUnavailable) {
		t.Fatalf("append on a full disk: %v, want unavailable", full)
	}

	// 2 MiB come back; 1000 appends write several times that much WAL.
	if err := os.Truncate(ballast, size-2<<20); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := appendOne(); err != nil {
			t.Fatalf("append %d after 2 MiB came back: %v", i+1, err)
		}
	}
	evs, last, err := readWhole(ctx, s, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != acked || last != int64(acked) {
		t.Fatalf("the log has %d events (last seq %d), want the %d acknowledged", len(evs), last, acked)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event #%d has seq %d", i+1, e.Seq)
		}
	}
}

// fillDisk writes path until its file system is full and returns its size.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for chunk := make([]byte, 64<<10); len(chunk) >= 512; {
		k, err := f.Write(chunk)
		n += int64(k)
		switch {
		case errors.Is(err, syscall.ENOSPC):
			if k == 0 {
				chunk = chunk[:len(chunk)/2]
			}
		case err != nil:
			t.Fatal(err)
		}
	}
	return n
}

// readWhole reads the whole log of key.
func readWhole(ctx context.Context, s *sqlite.Store, key rein.SessionKey) ([]rein.Event, int64, error) {
	var out []rein.Event
	var after, last int64
	for {
		evs, l, err := s.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return nil, 0, err
		}
		last = l
		if len(evs) == 0 {
			return out, last, nil
		}
		out = append(out, evs...)
		after = evs[len(evs)-1].Seq
	}
}
