package telemetry_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A tracer provider runs a batch span processor and an HTTP client in
// goroutines of its own: a shutdown that leaves one behind fails here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
