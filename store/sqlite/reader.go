package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxReadStmts bounds the prepared read statements; the queries are a
// fixed set (a few depend on the number of arguments), so the bound is
// only a guard: past it a query is simply run unprepared.
const maxReadStmts = 256

// reader runs read queries on the read pool with each query prepared once
// and kept (database/sql prepares it again on each connection it meets,
// once). modernc.org/sqlite compiles a query every time it is run
// unprepared, and under load that compiling was a fifth of the process's
// CPU.
type reader struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// stmt returns query prepared, preparing it now if need be (nil: run it
// unprepared). Preparing takes a connection of the pool, so it is never
// done for a query inside a read transaction (see readTx), and never under
// the lock.
func (r *reader) stmt(ctx context.Context, query string) *sql.Stmt {
	if st := r.prepared(query); st != nil {
		return st
	}
	st, err := r.db.PrepareContext(ctx, query)
	if err != nil {
		// Run unprepared: the query's own error (or success) is what the
		// caller gets.
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.stmts[query]; cur != nil {
		st.Close()
		return cur
	}
	if len(r.stmts) >= maxReadStmts || r.stmts == nil {
		st.Close()
		return nil
	}
	r.stmts[query] = st
	return st
}

// prepared returns query's statement if it is prepared.
func (r *reader) prepared(query string) *sql.Stmt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stmts[query]
}

// prepare prepares the queries read transactions run, which readTx only
// ever finds prepared.
func (r *reader) prepare(ctx context.Context, queries ...string) error {
	r.mu.Lock()
	r.stmts = map[string]*sql.Stmt{}
	r.mu.Unlock()
	for _, q := range queries {
		st, err := r.db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.stmts[q] = st
		r.mu.Unlock()
	}
	return nil
}

// QueryContext is sql.DB.QueryContext with the query prepared.
func (r *reader) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := r.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return r.db.QueryContext(ctx, query, args...)
}

// QueryRowContext is sql.DB.QueryRowContext with the query prepared.
func (r *reader) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := r.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return r.db.QueryRowContext(ctx, query, args...)
}

// in is the reader inside the read transaction tx.
func (r *reader) in(tx *sql.Tx) readTx { return readTx{r: r, tx: tx} }

func (r *reader) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	for _, st := range r.stmts {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	r.stmts = nil
	return first
}

// readTx runs queries in a read transaction with the reader's prepared
// statements. It only uses statements prepared already: preparing one
// would wait for a second connection while holding the transaction's,
// and a pool full of such transactions would wait forever.
type readTx struct {
	r  *reader
	tx *sql.Tx
}

// QueryContext is sql.Tx.QueryContext with the query prepared.
func (t readTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.r.prepared(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext is sql.Tx.QueryRowContext with the query prepared.
func (t readTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.r.prepared(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}
