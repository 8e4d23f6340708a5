-- 0003: the configured agent a session's runs use (store.Session.Agent).
-- Additive with a default, so instances of the previous version keep
-- working; existing sessions use the default agent.

ALTER TABLE sessions ADD COLUMN agent text NOT NULL DEFAULT '';
