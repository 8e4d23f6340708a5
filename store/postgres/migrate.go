package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
)

// migrationFiles are the schema's versions, one file each, named
// NNNN_title.sql and numbered from 0001 without gaps. A released migration
// is never edited: a change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchemaNewer is returned (wrapped) by Open and Migrate when the database
// was migrated by a newer Rein than this one: running against tables it does
// not know could corrupt them, so this build refuses and changes nothing.
var ErrSchemaNewer = errors.New("postgres: database schema is newer than this build of rein")

// migrateLockKey is the first half of the advisory lock key that serialises
// migrations; the second half is the schema's name, so that different
// schemas of one database migrate independently.
const migrateLockKey = 0x7265696e // "rein"

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order, checking that they
// are numbered 1, 2, 3, … (a gap or a duplicate is a build mistake).
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names { // fs.Glob returns sorted names
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("postgres: migration %s is not named NNNN_title.sql", base)
		}
		if v != len(ms)+1 {
			return nil, fmt.Errorf("postgres: migration %s: expected version %d", base, len(ms)+1)
		}
		b, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	return ms, nil
}

// SchemaVersion is the newest schema version this build knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// Migrate brings the database at dsn up to this build's schema version and
// reports the version before and after. The schema is the first of the
// connection's search_path (a DSN may set it, e.g. "?search_path=rein").
// It is safe to run from several processes at once: an advisory lock lets
// one migrate while the others wait and then find nothing to do. If the
// database is newer than this build, it returns an error wrapping
// ErrSchemaNewer and changes nothing. Open migrates too; Migrate is for
// deployments that upgrade the schema as a separate step.
func Migrate(ctx context.Context, dsn string) (from, to int, err error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return 0, 0, rein.Errorf(rein.CodeInvalidArgument, "postgres: bad DSN: %w", err)
	}
	return migrateConfig(ctx, cc)
}

func migrateConfig(ctx context.Context, cc *pgx.ConnConfig) (from, to int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, err
	}
	latest := len(ms)

	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return 0, 0, classify(ctx, ctx, "migrate: connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// One transaction for the lot: a migration that fails leaves the
	// database at the version it started from, and DDL is transactional
	// in PostgreSQL.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, classify(ctx, ctx, "migrate: begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))`, migrateLockKey); err != nil {
		return 0, 0, classify(ctx, ctx, "migrate: lock", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('rein_schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, 0, classify(ctx, ctx, "migrate: read version", err)
	}
	if exists {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM rein_schema_migrations`).Scan(&from); err != nil {
			return 0, 0, classify(ctx, ctx, "migrate: read version", err)
		}
	}
	if from > latest {
		return from, from, fmt.Errorf("%w: the database is at version %d and this build knows versions up to %d; "+
			"upgrade rein or use another schema (nothing was changed)", ErrSchemaNewer, from, latest)
	}
	if from == latest {
		return from, from, nil
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE TABLE rein_schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return 0, 0, classify(ctx, ctx, "migrate: create version table", err)
		}
	}
	for _, m := range ms[from:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return from, from, classify(ctx, ctx, "migrate: apply "+m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rein_schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return from, from, classify(ctx, ctx, "migrate: record "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return from, from, classify(ctx, ctx, "migrate: commit", err)
	}
	return from, latest, nil
}
