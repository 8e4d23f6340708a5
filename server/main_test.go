package server_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childDBEnv) != "" {
		runChild() // the crash test's server process; never returns
	}
	goleak.VerifyTestMain(m)
}
