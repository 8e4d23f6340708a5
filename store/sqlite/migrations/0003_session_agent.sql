-- Rein schema version 3: the configured agent a session's runs use
-- (store.Session.Agent). Existing sessions use the default agent.

ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT '';
