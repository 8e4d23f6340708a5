-- 0001: the first schema of Rein's PostgreSQL store.
--
-- Times are timestamptz (microsecond precision; the store truncates Go times
-- to match, so what it returns is what it stored). JSON a client or model
-- gave us is kept as `json`, not `jsonb`, so that it comes back byte for byte.
-- Identifier columns are COLLATE "C": ids order by bytes, as Go's
-- strings.Compare (and so every other backend) orders them, whatever the
-- database's locale, and key comparisons are plain memcmp.

CREATE TABLE sessions (
    owner      text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    parent_id  text COLLATE "C",
    metadata   json             NOT NULL,
    system     text,
    subagent   json,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (owner, id),
    FOREIGN KEY (owner, parent_id) REFERENCES sessions (owner, id)
);
CREATE INDEX sessions_by_owner ON sessions (owner, created_at DESC, id DESC);
CREATE INDEX sessions_by_parent ON sessions (owner, parent_id, created_at, id) WHERE parent_id IS NOT NULL;

-- One counter row per session, apart from the session row: appending
-- updates it once per session per transaction (holding its row lock until
-- commit is what makes seq gap-free across processes), and keeping it narrow
-- means those updates neither copy the session's metadata nor contend with
-- SetSystem. Its existence is also the "session exists" check of an append.
CREATE TABLE event_seqs (
    owner      text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    last_seq   bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, session_id),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);

-- No foreign key to sessions: rows are only ever inserted by the append
-- statement, which derives seq from the session's event_seqs row (so the
-- session exists by construction), and a per-row FK check would cost the
-- hottest insert in the system a lookup and a row lock.
CREATE TABLE events (
    owner      text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    seq        bigint           NOT NULL,
    id         text COLLATE "C" NOT NULL,
    run_id     text COLLATE "C",
    type       text             NOT NULL,
    payload    json             NOT NULL,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (owner, session_id, seq)
);

CREATE TABLE history (
    owner      text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    pos        bigint           GENERATED ALWAYS AS IDENTITY,
    msg        json             NOT NULL,
    PRIMARY KEY (owner, session_id, pos),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);

CREATE TABLE runs (
    id            text COLLATE "C" PRIMARY KEY,
    owner         text COLLATE "C" NOT NULL,
    session_id    text COLLATE "C" NOT NULL,
    status        text             NOT NULL,
    reason        text             NOT NULL DEFAULT '',
    error         text             NOT NULL DEFAULT '',
    input         text             NOT NULL DEFAULT '',
    client_id     text COLLATE "C",
    queue_order   bigint           NOT NULL DEFAULT 0,
    deadline      timestamptz,
    instance      text             NOT NULL DEFAULT '',
    input_tokens  bigint           NOT NULL DEFAULT 0,
    output_tokens bigint           NOT NULL DEFAULT 0,
    created_at    timestamptz      NOT NULL,
    started_at    timestamptz,
    ended_at      timestamptz,
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
CREATE UNIQUE INDEX runs_by_client_id ON runs (owner, session_id, client_id) WHERE client_id IS NOT NULL;
CREATE INDEX runs_by_session ON runs (owner, session_id, created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at, id);

CREATE TABLE supplements (
    owner       text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    pos         bigint           GENERATED ALWAYS AS IDENTITY,
    text        text             NOT NULL,
    source      text             NOT NULL,
    status      text             NOT NULL,
    run_id      text COLLATE "C" NOT NULL DEFAULT '',
    step        integer          NOT NULL DEFAULT 0,
    created_at  timestamptz      NOT NULL,
    consumed_at timestamptz,
    PRIMARY KEY (owner, session_id, id),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
CREATE INDEX supplements_queued ON supplements (owner, session_id, pos) WHERE status = 'queued';

CREATE TABLE confirmations (
    owner        text COLLATE "C" NOT NULL,
    session_id   text COLLATE "C" NOT NULL,
    tool_use_id  text COLLATE "C" NOT NULL,
    pos          bigint           GENERATED ALWAYS AS IDENTITY,
    run_id       text COLLATE "C" NOT NULL,
    name         text             NOT NULL,
    -- bytea, not json: a model may produce invalid JSON as a tool input,
    -- and the confirmation must still be stored and shown.
    input        bytea,
    state        text             NOT NULL,
    deny_message text             NOT NULL DEFAULT '',
    created_at   timestamptz      NOT NULL,
    resolved_at  timestamptz,
    PRIMARY KEY (owner, session_id, tool_use_id),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
CREATE INDEX confirmations_pending ON confirmations (owner, session_id, run_id) WHERE state = 'pending';

-- Fencing tokens come from one sequence for every session: strictly
-- increasing per session because they strictly increase globally, and never
-- reused even after a lease row is deleted on release.
CREATE SEQUENCE lease_tokens;

CREATE TABLE leases (
    owner      text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    run_id     text COLLATE "C" NOT NULL,
    holder     text             NOT NULL,
    token      bigint           NOT NULL,
    expires_at timestamptz      NOT NULL,
    PRIMARY KEY (owner, session_id),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
CREATE INDEX leases_by_expiry ON leases (expires_at);
