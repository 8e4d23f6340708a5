-- Rein schema version 7: stops by client id that came before their
-- user.message (store.RememberedStop). The admission of a message with a
-- client id reads its row by the primary key in the same write that
-- creates the run, and a stop reads the runs' client-id index in the same
-- write that stores the row: one writer, so neither can miss the other.

CREATE TABLE stops (
    session_pk INTEGER NOT NULL REFERENCES sessions (pk),
    client_id  TEXT    NOT NULL,
    mode       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_pk, client_id)
) WITHOUT ROWID;
