//go:build unix

package sqlite

import "syscall"

// descriptorsExhausted reports whether this process cannot open one more
// file descriptor now (it duplicates standard error and closes the copy).
// The driver reports EMFILE as SQLITE_CANTOPEN without the errno; this
// tells that case from a permissions problem, at the cost of two system
// calls on a path that is already failing.
func descriptorsExhausted() bool {
	fd, err := syscall.Dup(2)
	if err != nil {
		return outOfDescriptors(err)
	}
	syscall.Close(fd)
	return false
}
