// Package readme keeps the README honest: its test runs every shell block
// of README.md, in order, against a freshly built `rein` — the way a
// newcomer would paste them — and fails when a command breaks or stops
// showing what the README says it shows.
//
// It has no code of its own; the package exists for its test. How the test
// reads the blocks (so that README authors know what to write):
//
//   - Only ```sh blocks run. Each runs with bash -euo pipefail, in one
//     scratch folder; shell variables set in one block (SID=…) are seen by
//     the later ones, as in a terminal.
//   - `go build -o rein ./cmd/rein` is run first, from the repository root
//     (its output moved to a temporary folder), and builds the binary every
//     other block uses (./rein and rein both name it); `go run ./cmd/rein`
//     is read as that binary too. `go test
//     ./...` is skipped: it is what runs this test.
//   - localhost:8080 and 127.0.0.1:8080 become a free loopback port, which
//     `rein serve` and the client commands get through REIN_ADDR and
//     REIN_SERVER; the database and workspace are the scratch folder's.
//   - A command that runs until Ctrl-C — `rein serve`, or any line ending
//     in the comment `# (runs until Ctrl-C)` — is started in the
//     background. The test goes on once a server answers /healthz; a later
//     `rein serve` first stops the earlier one with Ctrl-C (SIGINT), which
//     must exit 0, as must every server at the end.
//   - A block whose first line is the comment `# (needs Docker)` is
//     skipped. In its place, TestContainerImageEnvironment runs the same
//     binary the way the Dockerfile's image does (its ENTRYPOINT, CMD and
//     ENV); internal/packaging checks the container files' other rules.
package readme
