//go:build !unix

package sqlite

// descriptorsExhausted cannot tell here: a failed open is reported as it is.
func descriptorsExhausted() bool { return false }
