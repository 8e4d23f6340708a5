-- 0006: a session's title (store.Session.Title; NULL until it has one: the
-- first user.message names an untitled session), and the index that tells a
-- list of sessions which are busy without reading their ended runs.
--
-- Additive (decision 0022): an instance of the previous version names its
-- columns and never sees these.

ALTER TABLE sessions ADD COLUMN title text;
CREATE INDEX runs_active ON runs (owner, session_id) WHERE status IN ('QUEUED', 'RUNNING');
