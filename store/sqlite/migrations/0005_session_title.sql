-- Rein schema version 5: a session's title (store.Session.Title; NULL
-- until it has one: the first user.message names an untitled session),
-- and the index that tells a list of sessions which are busy without
-- reading their ended runs.

ALTER TABLE sessions ADD COLUMN title TEXT;
CREATE INDEX runs_active ON runs (session_pk) WHERE status IN ('QUEUED', 'RUNNING');
