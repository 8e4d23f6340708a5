//go:build !unix

package sqlite

import "errors"

// fileLock is a no-op where flock does not exist: there the single-writer
// guarantee rests on the operator not starting two Rein processes on one
// file (docs/decisions/0012-sqlite-single-process-lock.md).
type fileLock struct{}

var errLocked = errors.New("locked")

func lockFile(string) (*fileLock, bool, error) { return &fileLock{}, false, nil }

func (l *fileLock) unlock(bool) {}
