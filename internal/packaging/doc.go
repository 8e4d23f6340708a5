// Package packaging reads the files that put Rein in a container — the
// Dockerfile, .dockerignore and compose.yaml — so that tests can hold them
// to what the README and docs/deploy.md promise: a static binary, a
// non-root user, the SQLite database in the /data volume, tokens on a
// non-loopback address, two instances on one PostgreSQL.
//
// It exists because CI has no Docker daemon to build the image: its tests
// check the files instead, and internal/readme runs the binary with the
// image's own environment (ParseDockerfile gives it the ENV, ENTRYPOINT and
// CMD).
package packaging
