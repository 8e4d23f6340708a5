package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/reinhq/rein"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// mapErr turns a database error into a rein error whose code the server can
// act on: the operator-fixable conditions (busy, I/O, full disk, read-only
// file) become unavailable so the server answers 503 and recovers when the
// condition clears; constraint violations become conflicts. Context errors
// pass through unchanged so callers can match them.
//
// The message says what happened; the database file's absolute path and
// the driver's text go into the cause (see dbErr), which logs and Error()
// show and a client's answer never does.
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
	if outOfDescriptors(err) {
		return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: %s", doing, msgNoDescriptors)
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, errStoreClosed) {
		return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: the store is closed", doing)
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: the database is locked by another connection", doing)
		case sqlite3.SQLITE_FULL:
			return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: the disk is full", doing)
		case sqlite3.SQLITE_IOERR:
			return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: disk I/O error", doing)
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_AUTH:
			if se.Code()&0xff == sqlite3.SQLITE_CANTOPEN && descriptorsExhausted() {
				// The driver's error lost the errno: EMFILE reads as "cannot open".
				return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: %s", doing, msgNoDescriptors)
			}
			return dbErr(rein.CodeUnavailable, file, err, "sqlite: %s: the database cannot be written (permissions or read-only file system)", doing)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return dbErr(rein.CodeInternal, file, err, "sqlite: %s: the database file is damaged", doing)
		case sqlite3.SQLITE_CONSTRAINT:
			if se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
				// The row a write refers to (its session) is gone.
				return dbErr(rein.CodeNotFound, file, err, "session not found")
			}
			return dbErr(rein.CodeConflict, file, err, "sqlite: %s: the write conflicts with a stored row", doing)
		}
	}
	return dbErr(rein.CodeInternal, file, err, "sqlite: %s failed", doing)
}

// dbErr is an error whose message is format (no path, no driver text) and
// whose cause is err prefixed with the database file, for the operator.
func dbErr(code rein.Code, file string, err error, format string, args ...any) error {
	return &rein.Error{Code: code, Message: fmt.Sprintf(format, args...), Err: fmt.Errorf("%s: %w", file, err)}
}

// errStoreClosed is the cause of operations on a closed Store.
var errStoreClosed = errors.New("store is closed")

func errClosed(file string) error {
	return &rein.Error{Code: rein.CodeUnavailable, Message: "sqlite: the store is closed", Err: fmt.Errorf("%s: %w", file, errStoreClosed)}
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
	if err == nil {
		// Asked of every operation's result: no allocation for success.
		return false
	}
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
