// Package backend opens a store.Store from a spec string, the form the
// command line and configuration use (`--store sqlite:PATH`), so that the
// server and the CLI choose a backend without importing each one.
//
// Specs:
//
//	""            the default: sqlite:./rein.db
//	sqlite:PATH   the embedded SQLite file at PATH (created if missing)
//	postgres://…  PostgreSQL (also postgresql://…), for many instances
//	memory:       an in-memory store (tests and the offline demo; nothing survives)
package backend

import (
	"context"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/postgres"
	"github.com/reinhq/rein/store/sqlite"
)

// DefaultSpec is the store used when none is configured.
const DefaultSpec = "sqlite:./rein.db"

// Options configures the opened store, whichever the backend.
type Options struct {
	// Clock is the store's time source; nil means the wall clock.
	Clock rein.Clock
	// LeaseTTL is the turn lease TTL the service will use (0: the
	// default): a shared database is told to end a transaction left idle
	// for half of it, so a paused instance cannot hold a session's rows
	// past the time another may take its turn.
	LeaseTTL time.Duration
}

// Open opens the store that spec names. An unknown or malformed spec is an
// invalid_argument error that lists the accepted forms.
func Open(ctx context.Context, spec string, opts Options) (store.Store, error) {
	scheme, rest, err := parse(spec)
	if err != nil {
		return nil, err
	}
	switch scheme {
	case "memory":
		return memory.New(memory.WithClock(opts.Clock)), nil
	case "sqlite":
		s, err := sqlite.Open(ctx, rest, sqlite.Options{Clock: opts.Clock})
		if err != nil {
			return nil, err
		}
		return s, nil
	case "postgres":
		s, err := postgres.Open(ctx, rest, postgres.Options{Clock: opts.Clock, IdleInTransaction: opts.LeaseTTL / 2})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	panic("unreachable: parse accepted scheme " + scheme)
}

// Migrate brings the store that spec names to this binary's schema and
// reports the version it found and the version it left. A memory store has
// no schema: it reports 0, 0.
func Migrate(ctx context.Context, spec string) (from, to int, err error) {
	scheme, rest, err := parse(spec)
	if err != nil {
		return 0, 0, err
	}
	switch scheme {
	case "memory":
		return 0, 0, nil
	case "sqlite":
		return sqlite.Migrate(ctx, rest)
	case "postgres":
		return postgres.Migrate(ctx, rest)
	}
	panic("unreachable: parse accepted scheme " + scheme)
}

func parse(spec string) (scheme, rest string, err error) {
	if spec == "" {
		spec = DefaultSpec
	}
	if strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://") {
		return "postgres", spec, nil
	}
	scheme, rest, ok := strings.Cut(spec, ":")
	switch {
	case ok && scheme == "memory" && rest == "":
		return scheme, "", nil
	case ok && scheme == "sqlite" && rest != "":
		return scheme, rest, nil
	case ok && scheme == "sqlite":
		return "", "", rein.InvalidArgument("store", "store spec %q has no path: use sqlite:PATH", spec)
	}
	return "", "", rein.InvalidArgument("store", "unknown store %q: use sqlite:PATH, postgres://… or memory:", spec)
}
