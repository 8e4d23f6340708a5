package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"unsafe"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/internal/histcodec"
)

// ------------------------------------------------------------------ history

func encodeHistory(msgs []rein.Message) ([]string, error) {
	encoded := make([]string, len(msgs))
	for i, m := range msgs {
		b, err := histcodec.Encode(m)
		if err != nil {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "history message %d: %w", i, err)
		}
		encoded[i] = string(b)
	}
	return encoded, nil
}

// appendHistory is the one implementation of a history append, for
// AppendHistory and Tx.AppendHistory.
func (tx *wtx) appendHistory(key rein.SessionKey, si *sessInfo, encoded []string) error {
	if len(encoded) == 0 {
		return nil
	}
	n := si.histLen
	if n < 0 {
		if err := tx.queryRow(`SELECT count(*) FROM history WHERE session_pk = ?`, si.pk).Scan(&n); err != nil {
			return err
		}
	}
	for i, m := range encoded {
		if _, err := tx.exec(`INSERT INTO history (session_pk, idx, message) VALUES (?, ?, ?)`, si.pk, n+int64(i), m); err != nil {
			return err
		}
	}
	tx.touch(si)
	si.histLen = n + int64(len(encoded))
	tx.op.history = append(tx.op.history, histRec{key, encoded})
	return nil
}

// history reads the transcript through the writer's connection, for
// Tx.History: it sees the transaction's own appends.
func (tx *wtx) history(key rein.SessionKey, si *sessInfo) ([]rein.Message, error) {
	rows, err := tx.query(`SELECT message FROM history WHERE session_pk = ? ORDER BY idx`, si.pk)
	if err != nil {
		return nil, err
	}
	return tx.s.scanHistory(key, rows)
}

// qHistoryByKey is a session's transcript and its existence in one
// statement (no row: no session; one row without a message: an empty
// transcript), read once per run: no read transaction of its own.
const qHistoryByKey = `SELECT h.message FROM sessions s LEFT JOIN history h ON h.session_pk = s.pk
		WHERE s.owner = ? AND s.id = ? ORDER BY h.idx`

// LoadHistory implements store.History.
func (s *Store) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	if encoded, ok := s.tails.history(key); ok {
		if err := s.usable(ctx); err != nil {
			return nil, err
		}
		out := make([]rein.Message, 0, len(encoded))
		for _, e := range encoded {
			m, err := s.decodeHistory(key, len(out), []byte(e))
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	gen := s.tails.factsGen()
	rows, err := s.rq.QueryContext(ctx, qHistoryByKey, key.Owner, key.ID)
	if err != nil {
		return nil, s.fail("loading history", err)
	}
	out, raw, found, err := s.scanHistoryOf(key, rows, true)
	if err != nil {
		return nil, s.fail("loading history", err)
	}
	if !found {
		return nil, notFound("session")
	}
	if raw != nil {
		s.tails.historyRead(gen, key, raw)
	}
	return settled(ctx, s, key, out, nil)
}

// decodeHistory decodes key's i-th history message as stored.
func (s *Store) decodeHistory(key rein.SessionKey, i int, b []byte) (rein.Message, error) {
	m, err := histcodec.Decode(b)
	if err != nil {
		return rein.Message{}, dbErr(rein.CodeInternal, s.file, err, "sqlite: history message %d of %s is unreadable", i, key)
	}
	return m, nil
}

// scanHistoryOf is scanHistory for qHistoryByKey's rows: found is whether
// there was a row at all (the session exists); a row without a message
// is the empty transcript's. With keep, raw is the encoded messages too,
// for a log tail, as long as they fit what a tail keeps of a history (nil
// otherwise, and without keep).
func (s *Store) scanHistoryOf(key rein.SessionKey, rows *sql.Rows, keep bool) (out []rein.Message, raw []string, found bool, err error) {
	defer rows.Close()
	out = []rein.Message{}
	if keep {
		raw = []string{}
	}
	size := 0
	for rows.Next() {
		found = true
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, nil, false, err
		}
		if b == nil {
			continue
		}
		if raw != nil {
			if size += len(b); size > histFactBytes {
				raw = nil
			} else {
				raw = append(raw, string(b))
			}
		}
		m, err := s.decodeHistory(key, len(out), b)
		if err != nil {
			return nil, nil, false, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, false, err
	}
	return out, raw, found, nil
}

// scanHistory decodes a transcript's rows and closes them.
func (s *Store) scanHistory(key rein.SessionKey, rows *sql.Rows) ([]rein.Message, error) {
	out, _, _, err := s.scanHistoryOf(key, rows, false)
	return out, err
}

// ---------------------------------------------------------------- event log

// AppendEvents implements store.EventLog. The events are durable when it
// returns: the writer answers only after the batch's COMMIT, and every
// commit is synced (synchronous=FULL).
func (s *Store) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	out, err := prepareEvents(key, evs)
	if err != nil {
		return nil, err
	}
	// A batch of up to insertChunk events is one INSERT statement, which
	// SQLite applies atomically on its own: the writer then needs no
	// savepoint around it, one of the costs group commit is paid in.
	write := s.write
	if len(out) <= insertChunk {
		write = s.writeAtomic
	}
	err = write(ctx, "appending events", func(tx *wtx) error {
		si, err := tx.fenced(key, fence)
		if err != nil {
			return err
		}
		return tx.appendEvents(key, si, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendEventsAsync implements store.AsyncAppender: AppendEvents with the
// append queued to the writer and its answer given to then.
func (s *Store) AppendEventsAsync(key rein.SessionKey, fence store.Fence, evs []rein.Event, then func([]rein.Event, error)) {
	out, err := prepareEvents(key, evs)
	if err != nil {
		then(nil, err)
		return
	}
	o := &op{ctx: context.Background(), doing: "appending events", atomic: len(out) <= insertChunk}
	o.fn = func(tx *wtx) error {
		si, err := tx.fenced(key, fence)
		if err != nil {
			return err
		}
		return tx.appendEvents(key, si, out)
	}
	o.then = func(err error) {
		if err != nil {
			then(nil, err)
			return
		}
		then(out, nil)
	}
	s.submitAsync(o)
}

// prepareEvents validates and copies evs and fills in what does not
// depend on the log (session id, event id, normalised time), so the
// writer only numbers and inserts them.
func prepareEvents(key rein.SessionKey, evs []rein.Event) ([]rein.Event, error) {
	out := make([]rein.Event, len(evs))
	for i, e := range evs {
		p, err := jsonOrEmpty("events["+strconv.Itoa(i)+"].payload", e.Payload)
		if err != nil {
			return nil, err
		}
		e.Payload = append(json.RawMessage(nil), p...)
		e.SessionID = key.ID
		if e.ID == "" {
			e.ID = id.New(id.Event)
		}
		e.CreatedAt = norm(e.CreatedAt)
		out[i] = e
	}
	return out, nil
}

// appendEvents is the one implementation of an event append, for
// AppendEvents and Tx.AppendEvents: it numbers out after the session's
// last seq, inserts them and asks for waiters to be woken at commit.
func (tx *wtx) appendEvents(key rein.SessionKey, si *sessInfo, out []rein.Event) error {
	if len(out) == 0 {
		return nil
	}
	prev := si.lastSeq
	seq := prev
	args := tx.s.insertArgs[:0]
	defer func() {
		clear(args[:cap(args)]) // no event's strings outlive its insert
		tx.s.insertArgs = args[:0]
	}()
	for i := range out {
		e := &out[i]
		seq++
		e.Seq = seq
		if e.CreatedAt.IsZero() {
			e.CreatedAt = tx.now
		}
		args = append(args, si.pk, e.Seq, e.ID, e.RunID, string(e.Type), textOf(e.Payload), e.CreatedAt.UnixMicro())
		if len(args) == 7*insertChunk || i == len(out)-1 {
			if _, err := tx.exec(insertEvents(len(args)/7), args...); err != nil {
				return err
			}
			args = args[:0]
		}
	}
	tx.touch(si)
	si.lastSeq = seq
	tx.op.appended = append(tx.op.appended, appendRec{key: key, prev: prev, evs: out})
	tx.wake(key)
	return nil
}

// textOf is the payload as the string SQLite binds as TEXT, without a
// copy: the bytes are the store's own copy (prepareEvents), unchanged
// while the statement runs, and the driver copies what it binds.
func textOf(p json.RawMessage) string {
	if len(p) == 0 {
		return ""
	}
	return unsafe.String(&p[0], len(p))
}

// insertChunk is the most events one INSERT statement carries; statements
// for 1..insertChunk rows are prepared once each and reused.
const insertChunk = 16

func insertEvents(rows int) string {
	return "INSERT INTO events (session_pk, seq, id, run_id, type, payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)" +
		strings.Repeat(", (?, ?, ?, ?, ?, ?, ?)", rows-1)
}

const qEvents = `SELECT seq, id, run_id, type, payload, created_at FROM events
		WHERE session_pk = ? AND seq > ? ORDER BY seq LIMIT ?`

// ReadEvents implements store.EventLog. A read the session's log tail
// covers is answered from memory (tail.go); otherwise the page and the
// last seq come from one read transaction, so last is never behind the
// page.
func (s *Store) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	if out, last, ok := s.tails.read(key, after, limit); ok {
		return out, last, nil
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, s.fail("reading events", err)
	}
	defer tx.Rollback()
	pk, last, err := readPK(ctx, s.rq.in(tx), key)
	if err != nil {
		return nil, 0, s.fail("reading events", err)
	}
	out := []rein.Event{}
	if limit <= 0 || after >= last {
		if err := s.tails.settle(ctx, key); err != nil {
			return nil, 0, err
		}
		return out, last, nil
	}
	rows, err := s.rq.in(tx).QueryContext(ctx, qEvents, pk, after, limit)
	if err != nil {
		return nil, 0, s.fail("reading events", err)
	}
	defer rows.Close()
	for rows.Next() {
		e := rein.Event{SessionID: key.ID}
		var typ string
		var payload []byte
		var created int64
		if err := rows.Scan(&e.Seq, &e.ID, &e.RunID, &typ, &payload, &created); err != nil {
			return nil, 0, s.fail("reading events", err)
		}
		e.Type = rein.EventType(typ)
		e.Payload = payload
		e.CreatedAt = fromMicros(sql.NullInt64{Int64: created, Valid: true})
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.fail("reading events", err)
	}
	if err := s.tails.settle(ctx, key); err != nil {
		return nil, 0, err
	}
	return out, last, nil
}

// usable is what a read answered from memory checks first, as a
// database read would: the caller's context, and that the store is open.
func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.closing:
		return errClosed(s.file)
	default:
		return nil
	}
}

// LastSeq implements store.EventLog.
func (s *Store) LastSeq(ctx context.Context, key rein.SessionKey) (int64, error) {
	if err := s.usable(ctx); err != nil {
		return 0, err
	}
	if last, ok := s.tails.lastSeq(key); ok {
		return last, nil
	}
	_, last, err := readPK(ctx, &s.rq, key)
	if err != nil {
		return 0, s.fail("reading last seq", err)
	}
	return settled(ctx, s, key, last, nil)
}

// WaitEvents implements store.EventLog. It subscribes to the session's
// in-process wake-up before reading the last seq, so an append that
// commits between the read and the wait still wakes it; nothing polls.
// SQLite is single-process (the file lock), so every append comes through
// this Store's writer and in-process wake-ups see them all.
func (s *Store) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	for {
		ch := s.waiters.subscribe(key)
		last, err := s.LastSeq(ctx, key)
		if err != nil || last > after {
			s.waiters.unsubscribe(key)
			return err
		}
		select {
		case <-ch:
			s.waiters.unsubscribe(key)
		case <-ctx.Done():
			s.waiters.unsubscribe(key)
			return ctx.Err()
		case <-s.closing:
			s.waiters.unsubscribe(key)
			return errClosed(s.file)
		}
	}
}
