-- 0010: the webhook outbox (store.Outbox, decision 0120). Deliveries are
-- derived from the event log: a destination's cursor on a session says how
-- far it has looked; the enqueuer moves it (a compare-and-set on the row)
-- and inserts the deliveries in one transaction. A claim hands out only a
-- stream's head (its pending delivery of the lowest seq), re-checked under
-- the row lock by the UPDATE, so two instances never hold one delivery.
--
-- Additive (decision 0022): an instance of the previous version never
-- reads these tables.

CREATE TABLE outbox_destinations (
    destination text COLLATE "C" PRIMARY KEY,
    created_at  timestamptz      NOT NULL
);

CREATE TABLE outbox_cursors (
    owner       text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    destination text COLLATE "C" NOT NULL,
    seq         bigint           NOT NULL,
    PRIMARY KEY (owner, session_id, destination),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);

CREATE TABLE outbox (
    id               text COLLATE "C" PRIMARY KEY,
    owner            text COLLATE "C" NOT NULL,
    session_id       text COLLATE "C" NOT NULL,
    destination      text COLLATE "C" NOT NULL,
    seq              bigint           NOT NULL,
    type             text             NOT NULL,
    body             bytea            NOT NULL,
    status           text             NOT NULL,
    attempts         integer          NOT NULL DEFAULT 0,
    last_error       text             NOT NULL DEFAULT '',
    next_at          timestamptz,
    first_attempt_at timestamptz,
    created_at       timestamptz      NOT NULL,
    claim            bigint           NOT NULL DEFAULT 0,
    claimed_at       timestamptz,
    claim_until      timestamptz,
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
CREATE UNIQUE INDEX outbox_by_stream ON outbox (destination, owner, session_id, seq);
CREATE INDEX outbox_pending ON outbox (destination, owner, session_id, seq) WHERE status = 'pending';
CREATE INDEX outbox_by_owner ON outbox (owner, id);
CREATE INDEX outbox_by_owner_status ON outbox (owner, status, id);
