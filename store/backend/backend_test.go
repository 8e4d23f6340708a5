package backend_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	s, err := backend.Open(t.Context(), "sqlite:"+path, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*sqlite.Store); !ok {
		t.Fatalf("sqlite: spec opened a %T", s)
	}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: "o", ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created: %v", err)
	}
}

// The empty spec is sqlite:./rein.db, relative to the working directory.
func TestOpenDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	s, err := backend.Open(t.Context(), "", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*sqlite.Store); !ok {
		t.Fatalf("default spec opened a %T", s)
	}
	if _, err := os.Stat("rein.db"); err != nil {
		t.Fatalf("default database ./rein.db not created: %v", err)
	}
}

func TestOpenMemory(t *testing.T) {
	s, err := backend.Open(t.Context(), "memory:", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*memory.Store); !ok {
		t.Fatalf("memory: spec opened a %T", s)
	}
}

func TestOpenRefusesUnknownSpecs(t *testing.T) {
	for _, spec := range []string{"mysql://x", "sqlite:", "memory:extra", "rein.db", "postgres:db"} {
		_, err := backend.Open(t.Context(), spec, backend.Options{})
		if !errors.Is(err, rein.ErrInvalidArgument) || !strings.Contains(err.Error(), spec) {
			t.Errorf("Open(%q) = %v, want invalid_argument naming the spec", spec, err)
		}
		if _, _, err := backend.Migrate(t.Context(), spec); !errors.Is(err, rein.ErrInvalidArgument) {
			t.Errorf("Migrate(%q) = %v, want invalid_argument", spec, err)
		}
	}
}

func TestMigrate(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	from, to, err := backend.Migrate(t.Context(), spec)
	if err != nil || from != 0 || to < 1 {
		t.Fatalf("Migrate(new) = %d, %d, %v", from, to, err)
	}
	from, to2, err := backend.Migrate(t.Context(), spec)
	if err != nil || from != to || to2 != to {
		t.Fatalf("Migrate(current) = %d, %d, %v", from, to2, err)
	}
	if from, to, err := backend.Migrate(t.Context(), "memory:"); err != nil || from != 0 || to != 0 {
		t.Fatalf("Migrate(memory:) = %d, %d, %v", from, to, err)
	}
}
