// Package chaos holds adversarial tests against real `rein serve`
// processes on loopback: the rein binary is built once, started on a real
// store (an SQLite file, and PostgreSQL when REIN_TEST_POSTGRES_DSN is
// set), and killed with SIGKILL at the worst moments — mid-stream, mid-tool
// — then started again on the same store.
//
// It exists because the promises of docs/api.md (a lost instance's run is
// resumed from its last saved step, a cut model request is made again and
// announced by agent.step_restarted, a tool call that may have started is
// answered in doubt and never run again, no acknowledged event is lost or
// rewritten) are about what survives the death of a process. In-process
// tests can stop a store at the Nth write, but only a separate process that
// the kernel kills outright shows that nothing depends on a deferred call,
// a flushed buffer or a goodbye to the database.
//
// The same holds for docs/tools.md "Confirmations are durable" (approval_test.go):
// a run parked on write_note confirmations is taken through a graceful
// shutdown (SIGTERM, exit 0), a kill -9, an answer split across a restart,
// an answer from another owner, and a deadline that passes while no server
// runs; the notes file in the session's workspace counts the side effects. The tests talk to the
// server only through its public HTTP API (the client package), as any
// user would.
//
// mcp_test.go starts `rein serve --config` with agents and a real stdio MCP
// server (the test server of tool/mcp, built by import path) and checks
// docs/tools.md: calls of SERVER__TOOL and their results, the idempotency
// key of every call (docs/api.md), isError, an agent's tools allow-list, a crashed server started again at
// the next call, and a configuration error reported as FILE:LINE: reason.
//
// cluster_test.go starts two `rein serve` processes (--instance-id A and B,
// --lease-ttl 1s) on one PostgreSQL schema and checks docs/api.md "multiple
// instances" over HTTP: a stop, a when_busy message, a supplement and a
// confirmation answer sent to B reach A's run (measured: milliseconds, not
// a lease period); B's event stream shows A's run live, gap-free; B takes
// over when A is killed or paused (SIGSTOP) past its TTL, and a continued A
// writes nothing more. cluster_bench_test.go measures cross-instance stop
// and stream latency against a LISTEN/NOTIFY floor, and runs per second on
// one, two and three instances.
//
// load_test.go is chaos under load: many sessions at once — streamed runs,
// queued runs, tool calls, supplements, confirmations answered or left
// parked — while the server is killed at a random moment (TestLoadKill),
// or one of two instances on PostgreSQL is (TestLoadClusterKill), or, in
// pgrestart_test.go, a PostgreSQL server of the test's own crashes and
// comes back (TestLoadPostgresRestart: the shared one is never
// restarted). After recovery it counts, from every session's log, runs
// and notes file, acknowledged events, runs, supplements and answers lost,
// supplements consumed twice, tool calls run twice and runs left
// non-terminal: each must be 0 (docs/reliability.md defines them). CI runs
// a short version; REIN_CHAOS_SOAK=1 the long one. diskfull_test.go fills
// the file system of an SQLite store (a small tmpfs) under load and gives
// some space back; sse_load_test.go opens a stream that is never read and
// 5,000 idle ones next to running sessions and measures runs, readers and
// the server's memory.
//
// The package has no code of its own besides this comment: everything is in
// its tests and their testdata.
package chaos
