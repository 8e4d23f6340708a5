//go:build unix

package workspace

import (
	"os"
	"syscall"
)

// readFlags open a file or folder for reading without blocking on a FIFO
// (whose open would wait for a writer); what is opened is then checked by
// its descriptor, and only regular files and folders are read.
const readFlags = os.O_RDONLY | syscall.O_NONBLOCK

// writeThroughFlags open the file a link points to for rewriting in place,
// again without blocking on a FIFO (checked by descriptor before writing).
const writeThroughFlags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC | syscall.O_NONBLOCK
