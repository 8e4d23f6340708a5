// Package typescript holds no Go code: it is the home of Rein's TypeScript
// client (src/, a dependency-free client of the native HTTP API for Node
// and browsers), and its Go test runs that client's tests against a real
// `rein serve`, so `go test ./...` (and CI) covers the client with the
// server it is built for.
package typescript
