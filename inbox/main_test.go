package inbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests consume one session's supplements from several goroutines at
// once: one left blocked behind the inbox's lock fails here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
