-- 0008: stops by client id that came before their user.message
-- (store.RememberedStop). Both writes that meet here — the stop that stores
-- a row, and the admission of the message that reads it — are Updates,
-- which lock the session row FOR UPDATE before reading anything (decision
-- 0023): they serialise, and the second reads what the first committed
-- (decision 0090).
--
-- Additive (decision 0022): an instance of the previous version never
-- reads it (and a stop it takes is by run id only).

CREATE TABLE stops (
    owner      text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    client_id  text COLLATE "C" NOT NULL,
    mode       text             NOT NULL,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (owner, session_id, client_id),
    FOREIGN KEY (owner, session_id) REFERENCES sessions (owner, id)
);
