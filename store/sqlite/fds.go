package sqlite

import (
	"errors"
	"syscall"
)

// msgNoDescriptors names running out of file descriptors and its fix.
const msgNoDescriptors = "too many open files: raise the limit (ulimit -n)"

// outOfDescriptors reports whether err is, or wraps, EMFILE (the process
// is at its limit) or ENFILE (the system is).
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
