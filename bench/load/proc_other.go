//go:build !linux

package load

import "errors"

// errNoProc says that this system offers no cheap reading of a process's
// current CPU time and resident set the tool knows; the report then lists
// them as missing rather than guessing.
var errNoProc = errors.New("rein bench: process CPU and RSS are read on Linux only")

func processCPU() (float64, error) { return 0, errNoProc }

func processRSS() (int64, error) { return 0, errNoProc }
