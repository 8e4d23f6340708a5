//go:build unix

package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// fileLock is an exclusive advisory lock (flock) on a file beside the
// database. It is a separate file on purpose: SQLite holds POSIX record
// locks on the database, and POSIX drops every such lock a process holds on
// a file when any descriptor of that file is closed, so Rein must never
// open and close the database file itself while SQLite uses it.
type fileLock struct{ f *os.File }

// errLocked reports that another process (or another Store in this one)
// holds the lock.
var errLocked = errors.New("locked")

func lockFile(path string) (*fileLock, bool, error) {
	created := false
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		created = true
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0o600)
	}
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, errLocked
		}
		return nil, false, err
	}
	return &fileLock{f: f}, created, nil
}

// unlock releases the lock; remove also deletes the lock file (used when
// Open fails on a file Rein must leave as it found it).
func (l *fileLock) unlock(remove bool) {
	if remove {
		os.Remove(l.f.Name())
	}
	l.f.Close()
}
