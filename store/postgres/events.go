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

// appendWriters is how many group commits may be in flight at once. A
// second writer could overlap one batch's fsync with the next batch, but
// measured on 2 cores it gained nothing (16 and 256 writers alike) and
// halved batch sizes; the server, not the round trip, is the bottleneck.
const appendWriters = 1

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
	out, err := prepareEvents(key, evs, s.now())
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		// Nothing to append, but a missing session or a stale fence is
		// still reported.
		octx, cancel := s.opContext(ctx)
		defer cancel()
		var checked, exists, holds bool
		b := &pgx.Batch{}
		queueCheck(b, key, fence.Token, false, &checked, &exists, &holds)
		if err := s.pool.SendBatch(octx, b).Close(); err != nil {
			return nil, s.fail(ctx, octx, "append events", err)
		}
		switch {
		case !exists:
			return nil, errSessionNotFound
		case fence.Token != 0 && !holds:
			return nil, errLeaseLost
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

// prepareEvents copies evs as they will be stored: ids and times filled in
// (now for a zero CreatedAt), payloads checked, SessionID set and Seq left
// for the appender to assign. For AppendEvents and Tx.AppendEvents alike.
func prepareEvents(key rein.SessionKey, evs []rein.Event, now time.Time) ([]rein.Event, error) {
	out := make([]rein.Event, len(evs))
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
	return out, nil
}

// eventColumns holds events column by column, as the unnest of the append
// statements takes them.
type eventColumns struct {
	ids, types, payloads []string
	runIDs               []*string
	times                []time.Time
}

func (c *eventColumns) add(e *rein.Event) {
	c.ids, c.runIDs = append(c.ids, e.ID), append(c.runIDs, nullString(e.RunID))
	c.types, c.payloads = append(c.types, string(e.Type)), append(c.payloads, string(e.Payload))
	c.times = append(c.times, e.CreatedAt)
}

// runWriter is the group-commit loop. It runs until Close, then finishes
// every request already handed over.
func (s *Store) runWriter() {
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
	round int // which appendSQL statement of the transaction carries it
}

// A group commit is one pipelined implicit transaction of a few statements,
// however many sessions it covers (per-statement cost, not per-row cost,
// dominates small appends):
//
//  1. lockLeasesSQL share-locks the lease rows whose token a fenced group
//     carries, so no takeover can commit between the check in step 3 and
//     our commit: the fence check and the write are one.
//  2. lockCountersSQL locks the sessions' counter rows.
//
//     Both lock row by row in the order given: sorted by key, bytewise (the
//     order of the key columns' "C" collation). Every batch, in every
//     process, takes its locks in that one order, leases before counters,
//     so no two can wait for each other in a cycle.
//  3. appendSQL assigns each group its seqs with one counter update per
//     session and inserts the events. The counter row lock, held until
//     commit, is what makes seqs gap-free across processes: a concurrent
//     append to the session waits for it and continues after our last seq.
//     It returns (group, base seq) for each group appended; a group it
//     leaves out was refused (missing session or stale fence).
//  4. notifySQL wakes other processes' listeners at commit.
//
// UPDATE … FROM updates a row once even if it joins several input rows, so
// appendSQL takes at most one group per session: groups of one session under
// different fences (rare: a run's events and a user's message in one batch)
// go to further appendSQL statements ("rounds") in the same transaction.

const lockLeasesSQL = `
SELECT 1
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(owner, session_id, token)
CROSS JOIN LATERAL (
    SELECT 1 FROM leases l WHERE l.owner = k.owner AND l.session_id = k.session_id AND l.token = k.token FOR SHARE
) locked`

const lockCountersSQL = `
SELECT 1
FROM unnest($1::text[], $2::text[]) AS k(owner, session_id)
CROSS JOIN LATERAL (
    SELECT 1 FROM event_seqs c WHERE c.owner = k.owner AND c.session_id = k.session_id FOR NO KEY UPDATE
) locked`

const appendSQL = `
WITH g AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
        WITH ORDINALITY AS g(owner, session_id, fence, n, gi)
), counter AS (
    UPDATE event_seqs c SET last_seq = c.last_seq + g.n
    FROM g
    WHERE c.owner = g.owner AND c.session_id = g.session_id
      AND (g.fence = 0 OR EXISTS (
          SELECT 1 FROM leases l WHERE l.owner = g.owner AND l.session_id = g.session_id AND l.token = g.fence))
    RETURNING g.gi, c.owner, c.session_id, c.last_seq - g.n AS base
), inserted AS (
    INSERT INTO events (owner, session_id, seq, id, run_id, type, payload, created_at)
    SELECT counter.owner, counter.session_id, counter.base + e.ord, e.id, e.run_id, e.type, e.payload::json, e.created_at
    FROM unnest($5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[])
             AS e(gi, ord, id, run_id, type, payload, created_at)
    JOIN counter ON counter.gi = e.gi
)
SELECT gi, base FROM counter`

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
	rounds := appendRounds(groupAppends(reqs))
	// The writer works for many callers at once, so no caller's context
	// governs the transaction; the store's Timeout bounds it instead.
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err = s.sendAppendBatch(ctx, rounds, &failed)
	if err != nil && isRetryable(err) {
		// Nothing reached the server (a pooled connection found dead
		// before use): the same batch on a fresh connection is safe.
		failed = failed[:0]
		err = s.sendAppendBatch(ctx, rounds, &failed)
	}
	if err != nil {
		return nil, s.fail(ctx, ctx, "append events", err)
	}
	return failed, nil
}

// appendRounds splits groups (sorted by session) so that no round has two
// groups of one session.
func appendRounds(groups []*group) [][]*group {
	var rounds [][]*group
	for i, g := range groups {
		r := 0
		if i > 0 && groups[i-1].key == g.key {
			r = groups[i-1].round + 1
		}
		g.round = r
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], g)
	}
	return rounds
}

// sendAppendBatch builds the batch's pipeline, sends it and assigns seqs
// from its results.
func (s *Store) sendAppendBatch(ctx context.Context, rounds [][]*group, failed *[]*group) error {
	b := &pgx.Batch{}

	// 1. Lease rows of fenced groups, in key order.
	var fenced []*group
	for _, round := range rounds {
		for _, g := range round {
			if g.fence != 0 {
				fenced = append(fenced, g)
			}
		}
	}
	slices.SortFunc(fenced, compareGroups)
	lOwners, lIDs, lTokens := make([]string, len(fenced)), make([]string, len(fenced)), make([]int64, len(fenced))
	for i, g := range fenced {
		lOwners[i], lIDs[i], lTokens[i] = g.key.Owner, g.key.ID, g.fence
	}
	if len(lTokens) > 0 {
		b.Queue(lockLeasesSQL, lOwners, lIDs, lTokens)
	}
	// 2. Counter rows, every session once (round 0 has them all). A
	// single session needs no ordering.
	owners := make([]string, len(rounds[0]))
	ids := make([]string, len(rounds[0]))
	for i, g := range rounds[0] {
		owners[i], ids[i] = g.key.Owner, g.key.ID
	}
	if len(owners) > 1 {
		b.Queue(lockCountersSQL, owners, ids)
	}
	// 3. One append per round.
	for _, round := range rounds {
		var (
			gOwners, gIDs  = make([]string, len(round)), make([]string, len(round))
			gFences, gNs   = make([]int64, len(round)), make([]int64, len(round))
			eGroups, eOrds []int64
			ec             eventColumns
		)
		for gi, g := range round {
			gOwners[gi], gIDs[gi], gFences[gi], gNs[gi] = g.key.Owner, g.key.ID, g.fence, int64(g.n)
			ord := int64(0)
			for _, r := range g.reqs {
				for i := range r.evs {
					ord++
					eGroups, eOrds = append(eGroups, int64(gi+1)), append(eOrds, ord)
					ec.add(&r.evs[i])
				}
			}
		}
		b.Queue(appendSQL, gOwners, gIDs, gFences, gNs, eGroups, eOrds, ec.ids, ec.runIDs, ec.types, ec.payloads, ec.times)
	}
	// 4. Wake other processes (delivered at commit).
	b.Queue(notifySQL, s.channel, owners, ids)

	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if len(lTokens) > 0 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if len(owners) > 1 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for _, round := range rounds {
		base := make(map[int64]int64, len(round))
		rows, _ := br.Query()
		for rows.Next() {
			var gi, first int64
			if err := rows.Scan(&gi, &first); err != nil {
				rows.Close()
				return err
			}
			base[gi] = first
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for gi, g := range round {
			seq, ok := base[int64(gi+1)]
			if !ok {
				*failed = append(*failed, g)
				continue
			}
			for _, r := range g.reqs {
				for i := range r.evs {
					seq++
					r.evs[i].Seq = seq
				}
			}
		}
	}
	if _, err := br.Exec(); err != nil { // the NOTIFY
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

// groupAppends groups reqs by session and fence, ordered by session key
// (then fence). Within a group, requests keep the order they arrived in.
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
	slices.SortStableFunc(groups, compareGroups)
	return groups
}

// compareGroups orders groups by session key, bytewise, then fence.
func compareGroups(a, b *group) int {
	return cmp.Or(cmp.Compare(a.key.Owner, b.key.Owner), cmp.Compare(a.key.ID, b.key.ID), cmp.Compare(a.fence, b.fence))
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
