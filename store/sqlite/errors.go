package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/reinhq/rein"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// mapErr turns a database error into a rein error whose code the server can
// act on: the operator-fixable conditions (busy, I/O, full disk, read-only
// file) become unavailable so the server answers 503 and recovers when the
// condition clears; constraint violations become conflicts. Context errors
// pass through unchanged so callers can match them.
func mapErr(file, doing string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var re *rein.Error
	if errors.As(err, &re) {
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, errStoreClosed) {
		return rein.Errorf(rein.CodeUnavailable, "sqlite %s: %s: the store is closed", file, doing)
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return rein.Errorf(rein.CodeUnavailable, "sqlite %s: %s: the database is locked by another connection: %w", file, doing, err)
		case sqlite3.SQLITE_FULL:
			return rein.Errorf(rein.CodeUnavailable, "sqlite %s: %s: the disk is full: %w", file, doing, err)
		case sqlite3.SQLITE_IOERR:
			return rein.Errorf(rein.CodeUnavailable, "sqlite %s: %s: disk I/O error: %w", file, doing, err)
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_AUTH:
			return rein.Errorf(rein.CodeUnavailable, "sqlite %s: %s: the database cannot be written (permissions or read-only file system): %w", file, doing, err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return rein.Errorf(rein.CodeInternal, "sqlite %s: %s: the database file is damaged: %w", file, doing, err)
		case sqlite3.SQLITE_CONSTRAINT:
			if se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
				// The row a write refers to (its session) is gone.
				return rein.Errorf(rein.CodeNotFound, "sqlite %s: %s: session not found: %w", file, doing, err)
			}
			return rein.Errorf(rein.CodeConflict, "sqlite %s: %s: %w", file, doing, err)
		}
	}
	return rein.Errorf(rein.CodeInternal, "sqlite %s: %s: %w", file, doing, err)
}

// errStoreClosed is the cause of operations on a closed Store.
var errStoreClosed = errors.New("store is closed")

func errClosed(file string) error {
	return &rein.Error{Code: rein.CodeUnavailable, Message: "sqlite " + file + ": the store is closed", Err: errStoreClosed}
}

func errNotRein(file, why string) error {
	return rein.Errorf(rein.CodeInvalidArgument, "%s is not a Rein database (%s); it was not modified", file, why)
}

func notFound(what string) error { return rein.Errorf(rein.CodeNotFound, "%s not found", what) }

func errLeaseLost() error {
	return &rein.Error{Code: rein.CodeConflict, Message: "turn lease lost: a newer run holds the session", Err: rein.ErrLeaseLost}
}

// isCode reports whether err is a SQLite error with one of the primary
// result codes.
func isCode(err error, codes ...int) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.Code()&0xff == c {
			return true
		}
	}
	return false
}

// fail maps err like mapErr, except that once Close has begun every
// database error reads as "the store is closed" rather than whatever a
// closed handle happens to say.
func (s *Store) fail(doing string, err error) error {
	if err == nil {
		return nil
	}
	select {
	case <-s.closing:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && rein.CodeOf(err) == rein.CodeInternal {
			return errClosed(s.file)
		}
	default:
	}
	return mapErr(s.file, doing, err)
}
