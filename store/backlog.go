package store

import "github.com/reinhq/rein"

// Backlog is an optional capability (found by type assertion) of a backend
// whose writes wait in a queue for a writer (SQLite's single writer, the
// PostgreSQL append writers): how many wait now, and how many the queue
// holds before its callers block. It lets admission control refuse new work
// quickly while the store is behind, instead of letting every request wait
// its turn until its deadline.
//
// Backlog MUST be cheap (no I/O, no lock a write holds) and safe for
// concurrent use: it is read on every admission. The figures are a gauge,
// not a promise: they may be stale by the time the caller acts on them.
type Backlog interface {
	// Backlog returns the writes queued and not yet taken by the writer,
	// and the queue's capacity (≥ 1).
	Backlog() (pending, capacity int)
}

// Immediate is the capability of a store whose writes complete without
// waiting for a disk or a network (the memory store): a caller may make
// them inline, on its own goroutine, where for a store that waits it hands
// them to a goroutine of its own and goes on. A run's event writer does:
// handing a delta to a fresh goroutine cost more than the append itself.
type Immediate interface {
	// Immediate reports whether the store's writes complete without I/O.
	Immediate() bool
}

// AsyncAppender is the capability of a store whose appends are made by a
// writer goroutine of its own (SQLite's single writer): a caller that
// would otherwise start a goroutine only to wait for an append hands the
// append over and goes on. A run's event writer does: a goroutine per
// batch of deltas, parked until its commit, was a cost of every streamed
// event.
type AsyncAppender interface {
	// AppendEventsAsync is AppendEvents without waiting: it validates and
	// copies evs before it returns (the caller may reuse them), queues the
	// append, and calls then exactly once with what AppendEvents would
	// have returned, once the events are durable or the append failed —
	// also when the store closes first. The append has no deadline but
	// the store's own bounds. then runs on the store's writer goroutine:
	// it must return quickly and must not call the store; ownership of
	// the events it gets passes to it.
	AppendEventsAsync(key rein.SessionKey, fence Fence, evs []rein.Event, then func([]rein.Event, error))
}
