//go:build !unix

package workspace

import "os"

// readFlags open a file or folder for reading (see open_unix.go).
const readFlags = os.O_RDONLY

// writeThroughFlags open the file a link points to for rewriting in place.
const writeThroughFlags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
