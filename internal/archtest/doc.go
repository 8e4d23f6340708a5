// Package archtest keeps docs/architecture.md true: its test reads the
// document's table of packages and what each may import, and checks it
// against the imports `go list` reports for every package of the module,
// together with the rules that matter most for the design (the root is
// vocabulary only; the agent loop and run handles never reach HTTP or SQL;
// storage never reaches the agent or the service above it).
//
// A failure says which package imports what, and whether the code or the
// document should change: a new package needs a row, a new dependency
// needs its row to allow it, and an import that breaks a rule needs
// another design.
//
// The package exists for its test and has no code of its own.
package archtest
