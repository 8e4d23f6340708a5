package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// Group commit limits. A batch takes whatever appends are pending when the
// writer is free, up to these; they keep one transaction's lock hold time
// and memory bounded, not its latency (the writer never waits to fill one).
const (
	maxBatchItems  = 256
	maxBatchEvents = 4096
)

// appendReq is one AppendEvents call waiting for the writer.
type appendReq struct {
	ctx   context.Context
	key   rein.SessionKey
	fence int64
	evs   []rein.Event // ids and times filled in; the writer sets Seq
	done  chan error   // buffered: the writer never blocks on a caller
}

// AppendEvents appends evs to the session's log. It hands the events to the
// store's writer, which commits them together with every other append
// pending at that moment (group commit), and returns once that transaction
// has committed. See the package doc and decision 0020.
func (s *Store) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]rein.Event, len(evs))
	now := s.now()
	for i, e := range evs {
		if e.ID == "" {
			e.ID = id.NewAt(id.Event, now)
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		} else {
			e.CreatedAt = dbTime(e.CreatedAt)
		}
		p, err := jsonOrEmpty("events["+strconv.Itoa(i)+"].payload", e.Payload)
		if err != nil {
			return nil, err
		}
		e.Payload = p
		e.SessionID = key.ID
		e.Seq = 0
		out[i] = e
	}
	if len(out) == 0 {
		// Nothing to append, but a missing session or a stale fence is
		// still reported.
		err := s.inTx(ctx, "append events", func(ctx context.Context, tx pgx.Tx) error {
			return checkSessionAndFence(ctx, tx, key, fence, false)
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}

	r := &appendReq{ctx: ctx, key: key, fence: fence.Token, evs: out, done: make(chan error, 1)}
	select {
	case s.appends <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closed:
		return nil, errClosed
	}
	select {
	case err := <-r.done:
		if err != nil {
			return nil, err
		}
		return out, nil
	case <-ctx.Done():
		// The append may still commit: like any database write whose
		// caller stopped waiting, its outcome is unknown to the caller.
		return nil, ctx.Err()
	case <-s.writersDone:
		// Close raced the hand-over and the writer has gone: the request
		// was never taken, so nothing was written.
		select {
		case err := <-r.done:
			if err != nil {
				return nil, err
			}
			return out, nil
		default:
			return nil, errClosed
		}
	}
}

// runWriter is the group-commit loop. It runs until Close, then finishes
// every request already handed over.
func (s *Store) runWriter() {
	defer close(s.writersDone)
	var batch []*appendReq
	for {
		batch = batch[:0]
		select {
		case r := <-s.appends:
			batch = append(batch, r)
		case <-s.closed:
			for {
				select {
				case r := <-s.appends:
					s.commit([]*appendReq{r})
				default:
					return
				}
			}
		}
		n := len(batch[0].evs)
	fill:
		for len(batch) < maxBatchItems && n < maxBatchEvents {
			select {
			case r := <-s.appends:
				batch = append(batch, r)
				n += len(r.evs)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

// group is the appends of one session under one fence within a batch: they
// share one counter update, one lease check and one INSERT.
type group struct {
	key   rein.SessionKey
	fence int64
	reqs  []*appendReq
	n     int
}

// appendSQL appends a group's events. The lease CTE takes a share lock on the
// lease row when the token matches, so a takeover cannot commit between
// this check and our commit (fenced writes check the token in the same
// transaction). The counter UPDATE assigns the group's seqs in one step and
// holds the counter row until commit: a concurrent append to the session,
// from this process or another, waits for it and continues after our last
// seq. It returns one row (the new last seq) on success, none if the session
// is missing or the fence is stale.
const appendSQL = `
WITH lease AS (
    SELECT 1 FROM leases WHERE owner = $1 AND session_id = $2 AND token = $3 FOR SHARE
), counter AS (
    UPDATE event_seqs SET last_seq = last_seq + $4
    WHERE owner = $1 AND session_id = $2 AND ($3 = 0 OR EXISTS (SELECT 1 FROM lease))
    RETURNING last_seq
), inserted AS (
    INSERT INTO events (owner, session_id, seq, id, run_id, type, payload, created_at)
    SELECT $1, $2, counter.last_seq - $4 + e.ord, e.id, e.run_id, e.type, e.payload::json, e.created_at
    FROM counter,
         unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::timestamptz[])
             WITH ORDINALITY AS e(id, run_id, type, payload, created_at, ord)
)
SELECT last_seq FROM counter`

// notifySQL tells other processes' listeners about the batch's sessions.
// NOTIFY is transactional: it is delivered at commit, and not at all on
// rollback.
const notifySQL = `
SELECT pg_notify($1, CASE WHEN octet_length(p) < 7900 THEN p ELSE '*' END)
FROM (
    SELECT json_build_array(c.owner, c.session_id, c.last_seq)::text AS p
    FROM event_seqs c
    JOIN unnest($2::text[], $3::text[]) AS k(owner, session_id) USING (owner, session_id)
) n`

// commit writes a batch in one pipelined implicit transaction: the
// statements up to the pipeline's Sync commit or roll back together, in one
// round trip. A request whose group the database refused (missing session,
// stale fence) fails alone; a statement error (which aborts the whole
// transaction) sends every request of the batch through again on its own,
// so that one bad request fails only itself.
func (s *Store) commit(batch []*appendReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			// The caller has gone; not writing is the one safe choice
			// (it was told ctx.Err(), which promises nothing was done
			// only if we now do nothing).
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	failed, err := s.commitOnce(live)
	if err == nil {
		s.finish(live, failed)
		return
	}
	if len(live) == 1 || !isStatementError(err) {
		for _, r := range live {
			r.done <- err
		}
		return
	}
	for _, r := range live {
		failed, err := s.commitOnce([]*appendReq{r})
		if err != nil {
			r.done <- err
			continue
		}
		s.finish([]*appendReq{r}, failed)
	}
}

// isStatementError reports whether the batch failed because of something a
// request contained (a server-side error), as opposed to the connection:
// only then is retrying the requests one by one useful.
func isStatementError(err error) bool {
	var re *rein.Error
	if !errors.As(err, &re) {
		return false
	}
	return re.Code == rein.CodeConflict || re.Code == rein.CodeInvalidArgument ||
		re.Code == rein.CodeNotFound || re.Code == rein.CodeInternal
}

// commitOnce runs one transaction for reqs. It returns the groups the
// database refused, or the error that aborted the transaction.
func (s *Store) commitOnce(reqs []*appendReq) (failed []*group, err error) {
	groups := groupAppends(reqs)
	b := &pgx.Batch{}
	owners := make([]string, 0, len(groups))
	ids := make([]string, 0, len(groups))
	for i, g := range groups {
		var (
			evIDs    = make([]string, 0, g.n)
			runIDs   = make([]*string, 0, g.n)
			types    = make([]string, 0, g.n)
			payloads = make([]string, 0, g.n)
			times    = make([]time.Time, 0, g.n)
		)
		for _, r := range g.reqs {
			for _, e := range r.evs {
				evIDs = append(evIDs, e.ID)
				runIDs = append(runIDs, nullString(e.RunID))
				types = append(types, string(e.Type))
				payloads = append(payloads, string(e.Payload))
				times = append(times, e.CreatedAt)
			}
		}
		b.Queue(appendSQL, g.key.Owner, g.key.ID, g.fence, g.n, evIDs, runIDs, types, payloads, times)
		if i == 0 || groups[i-1].key != g.key {
			owners = append(owners, g.key.Owner)
			ids = append(ids, g.key.ID)
		}
	}
	b.Queue(notifySQL, s.channel, owners, ids)

	// The writer works for many callers at once, so no caller's context
	// governs the transaction; the store's Timeout bounds it instead.
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err = s.sendAppendBatch(ctx, b, groups, &failed)
	if err != nil && isRetryable(err) {
		// Nothing reached the server (a pooled connection found dead
		// before use): the same batch on a fresh connection is safe.
		failed = failed[:0]
		err = s.sendAppendBatch(ctx, b2(b), groups, &failed)
	}
	if err != nil {
		return nil, s.fail(ctx, ctx, "append events", err)
	}
	return failed, nil
}

// b2 copies a batch so it can be sent again (a pgx.Batch is single-use).
func b2(b *pgx.Batch) *pgx.Batch {
	nb := &pgx.Batch{}
	for _, q := range b.QueuedQueries {
		nb.Queue(q.SQL, q.Arguments...)
	}
	return nb
}

// sendAppendBatch sends b and assigns seqs from its results.
func (s *Store) sendAppendBatch(ctx context.Context, b *pgx.Batch, groups []*group, failed *[]*group) error {
	br := s.pool.SendBatch(ctx, b)
	for _, g := range groups {
		var last int64
		err := br.QueryRow().Scan(&last)
		if errors.Is(err, pgx.ErrNoRows) {
			*failed = append(*failed, g)
			continue
		}
		if err != nil {
			_ = br.Close()
			return err
		}
		seq := last - int64(g.n)
		for _, r := range g.reqs {
			for i := range r.evs {
				seq++
				r.evs[i].Seq = seq
			}
		}
	}
	if _, err := br.Exec(); err != nil { // the NOTIFY
		_ = br.Close()
		return err
	}
	// Close reads up to the pipeline's Sync: only a nil here means the
	// implicit transaction committed.
	return br.Close()
}

// isRetryable reports whether err is guaranteed to have happened before
// anything was sent, so resending cannot append twice.
func isRetryable(err error) bool {
	var retryable interface{ SafeToRetry() bool }
	return errors.As(err, &retryable) && retryable.SafeToRetry()
}

// finish answers a committed batch's requests and wakes local waiters.
// Refused groups are told why: a missing session or a stale fence.
func (s *Store) finish(reqs []*appendReq, failed []*group) {
	bad := map[*appendReq]bool{}
	for _, g := range failed {
		err := s.refusal(g)
		for _, r := range g.reqs {
			bad[r] = true
			r.done <- err
		}
	}
	last := map[rein.SessionKey]int64{}
	for _, r := range reqs {
		if bad[r] {
			continue
		}
		last[r.key] = max(last[r.key], r.evs[len(r.evs)-1].Seq)
		r.done <- nil
	}
	for k, seq := range last {
		s.hub.notify(k, seq)
	}
}

// refusal explains why the database refused a group's append: the session
// is missing, or the fence no longer holds the turn.
func (s *Store) refusal(g *group) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var exists bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_seqs WHERE owner = $1 AND session_id = $2)`,
		g.key.Owner, g.key.ID).Scan(&exists)
	switch {
	case err != nil:
		return s.fail(ctx, ctx, "append events", err)
	case !exists:
		return errSessionNotFound
	default:
		return errLeaseLost
	}
}

// groupAppends groups reqs by session and fence, ordered by session key so
// that every transaction (in every process) locks counter rows in the same
// order and two batches can never deadlock. Within a group, requests keep
// the order they arrived in.
func groupAppends(reqs []*appendReq) []*group {
	type gk struct {
		key   rein.SessionKey
		fence int64
	}
	byKey := map[gk]*group{}
	var groups []*group
	for _, r := range reqs {
		k := gk{r.key, r.fence}
		g := byKey[k]
		if g == nil {
			g = &group{key: r.key, fence: r.fence}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.reqs = append(g.reqs, r)
		g.n += len(r.evs)
	}
	slices.SortStableFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.key.Owner, b.key.Owner), cmp.Compare(a.key.ID, b.key.ID), cmp.Compare(a.fence, b.fence))
	})
	return groups
}

// ReadEvents returns up to limit events after the cursor and the session's
// last seq. The last seq is read after the events, so it is never below the
// page's last seq.
func (s *Store) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	if err := s.checkOpen(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		// Nothing asked for; still report the last seq (and a missing
		// session).
		last, err := s.LastSeq(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		return []rein.Event{}, last, nil
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`SELECT seq, id, run_id, type, payload, created_at FROM events
		WHERE owner = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, key.Owner, key.ID, after, limit)
	b.Queue(`SELECT last_seq FROM event_seqs WHERE owner = $1 AND session_id = $2`, key.Owner, key.ID)
	br := s.pool.SendBatch(octx, b)
	defer br.Close()

	rows, _ := br.Query()
	evs := make([]rein.Event, 0, min(limit, 1024))
	for rows.Next() {
		var (
			e       rein.Event
			runID   *string
			typ     string
			payload []byte
		)
		if err := rows.Scan(&e.Seq, &e.ID, &runID, &typ, &payload, &e.CreatedAt); err != nil {
			rows.Close()
			return nil, 0, s.fail(ctx, octx, "read events", err)
		}
		e.SessionID = key.ID
		e.Type = rein.EventType(typ)
		if runID != nil {
			e.RunID = *runID
		}
		if payload != nil {
			e.Payload = json.RawMessage(payload)
		}
		e.CreatedAt = e.CreatedAt.UTC()
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.fail(ctx, octx, "read events", err)
	}
	var last int64
	if err := br.QueryRow().Scan(&last); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, 0, errSessionNotFound
		}
		return nil, 0, s.fail(ctx, octx, "read events", err)
	}
	if err := br.Close(); err != nil {
		return nil, 0, s.fail(ctx, octx, "read events", err)
	}
	return evs, last, nil
}

// LastSeq returns the session's last seq.
func (s *Store) LastSeq(ctx context.Context, key rein.SessionKey) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var last int64
	err := s.pool.QueryRow(octx, `SELECT last_seq FROM event_seqs WHERE owner = $1 AND session_id = $2`, key.Owner, key.ID).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errSessionNotFound
	}
	if err != nil {
		return 0, s.fail(ctx, octx, "read last seq", err)
	}
	return last, nil
}

// WaitEvents blocks until the session's last seq passes after. It is woken
// by appends in this process directly and by other processes' appends
// through LISTEN/NOTIFY (decision 0021); it re-reads the last seq only when
// woken, after a listener reconnect, and every Options.WaitRecheck as a
// safety net — never in a hot loop. A database outage that begins while it
// waits does not end the wait; one at the start (the first read) is
// reported.
func (s *Store) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	w := s.hub.watch(key)
	defer s.hub.unwatch(key, w)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for first := true; ; first = false {
		ch, heard := s.hub.state(w)
		if heard > after {
			return nil
		}
		last, err := s.LastSeq(ctx, key)
		switch {
		case err == nil && last > after:
			return nil
		case err != nil && (first || ctx.Err() != nil || !errors.Is(err, rein.ErrUnavailable)):
			return err
		}
		// A re-read that failed because the database is unreachable is
		// not the end of the wait: like a reader whose connection blips,
		// keep waiting (the caller's context bounds it) and read again
		// when woken — at the latest when the listener reconnects.
		if s.hooks.waiting != nil {
			s.hooks.waiting(key)
		}
		if timer == nil {
			timer = time.NewTimer(s.waitRecheck)
		} else {
			timer.Reset(s.waitRecheck)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return errClosed
		}
	}
}

var (
	errSessionNotFound = rein.Errorf(rein.CodeNotFound, "session not found")
	errLeaseLost       = &rein.Error{Code: rein.CodeConflict, Message: "turn lease lost: the fencing token no longer holds the session's turn", Err: rein.ErrLeaseLost}
)

// nullString maps "" to NULL.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
