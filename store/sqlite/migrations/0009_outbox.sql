-- Rein schema version 9: the webhook outbox (store.Outbox, decision 0120).
-- Deliveries are derived from the event log: a destination's cursor on a
-- session says how far it has looked, and the enqueuer moves it and stores
-- the deliveries in one write. Every table names its session by pk, so a
-- deleted session takes its cursors and deliveries with it and a session
-- later made with its key starts again from seq 1.

CREATE TABLE outbox_destinations (
    destination TEXT    PRIMARY KEY,
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE outbox_cursors (
    session_pk  INTEGER NOT NULL REFERENCES sessions (pk),
    destination TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    PRIMARY KEY (session_pk, destination)
) WITHOUT ROWID;

CREATE TABLE outbox (
    id               TEXT    PRIMARY KEY,
    session_pk       INTEGER NOT NULL REFERENCES sessions (pk),
    owner            TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    destination      TEXT    NOT NULL,
    seq              INTEGER NOT NULL,
    type             TEXT    NOT NULL,
    body             BLOB    NOT NULL,
    status           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    last_error       TEXT    NOT NULL,
    next_at          INTEGER,
    first_attempt_at INTEGER,
    created_at       INTEGER NOT NULL,
    claim            INTEGER NOT NULL,
    claimed_at       INTEGER,
    claim_until      INTEGER
);
-- One delivery per (destination, event); the pending part is what a claim
-- searches for each stream's head.
CREATE UNIQUE INDEX outbox_by_stream ON outbox (destination, session_pk, seq);
CREATE INDEX outbox_pending ON outbox (destination, session_pk, seq) WHERE status = 'pending';
CREATE INDEX outbox_by_owner ON outbox (owner, id);
CREATE INDEX outbox_by_owner_status ON outbox (owner, status, id);
