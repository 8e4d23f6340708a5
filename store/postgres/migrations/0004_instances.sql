-- 0004: one row per live instance (store.Heartbeats), so an operator can
-- see who is up: SELECT * FROM rein_instances.

CREATE TABLE instances (
    id           text        PRIMARY KEY,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);

CREATE VIEW rein_instances AS
    SELECT id, started_at, heartbeat_at
    FROM instances
    WHERE expires_at > now()
    ORDER BY started_at, id;
