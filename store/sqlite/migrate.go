package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
)

// migrationFiles holds the schema, one file per version, named
// NNNN_title.sql. They ship inside the binary so a Rein binary can always
// bring a database to the schema it was built for.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations parses migrationFiles; versions must run 1, 2, 3... without a
// gap, which a test checks so a misnamed file fails the build's tests, not
// a user's upgrade.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_title.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.name, i+1)
		}
	}
	return out, nil
}

// latestVersion is the schema version this binary writes.
func latestVersion() int {
	ms, err := migrations()
	if err != nil {
		panic("sqlite: embedded migrations are broken: " + err.Error())
	}
	return len(ms)
}

func errNewerSchema(file string, v int) error {
	return rein.Errorf(rein.CodeInvalidArgument,
		"%s has Rein schema version %d, newer than this binary understands (up to %d): upgrade Rein; the database was not modified",
		file, v, latestVersion())
}

// migrate brings the database on conn to the latest schema in one
// transaction: either every pending migration and the new version are
// committed, or nothing is. It returns the version found and the version
// left.
func migrate(ctx context.Context, conn *sql.Conn, file string) (from, to int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, 0, rein.Errorf(rein.CodeInternal, "sqlite: embedded migrations: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, mapErr(file, "starting migration", err)
	}
	committed := false
	defer func() {
		if !committed {
			conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	from, err = readVersion(ctx, conn)
	if err != nil {
		return 0, 0, mapErr(file, "reading schema version", err)
	}
	if from > len(ms) {
		// Checked again under the write lock: the file may have changed
		// since Open inspected it.
		return from, from, errNewerSchema(file, from)
	}
	if from == len(ms) {
		return from, from, nil
	}
	if from == 0 {
		var tables int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
				WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`).Scan(&tables); err != nil {
			return 0, 0, mapErr(file, "inspecting", err)
		}
		if tables > 0 {
			return 0, 0, errNotRein(file, "it holds tables but no Rein schema_version")
		}
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); err != nil {
		return 0, 0, mapErr(file, "creating schema_version", err)
	}
	for _, m := range ms[from:] {
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return 0, 0, mapErr(file, "applying migration "+m.name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "DELETE FROM schema_version"); err != nil {
		return 0, 0, mapErr(file, "recording schema version", err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO schema_version (version) VALUES (?)", len(ms)); err != nil {
		return 0, 0, mapErr(file, "recording schema version", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, 0, mapErr(file, "committing migration", err)
	}
	committed = true
	return from, len(ms), nil
}

// readVersion returns the recorded schema version, 0 for an empty
// database. Whether the database is Rein's at all is decided earlier, by
// inspect.
func readVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").Scan(&n)
	if err != nil || n == 0 {
		return 0, err
	}
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT max(version) FROM schema_version").Scan(&v); err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}
