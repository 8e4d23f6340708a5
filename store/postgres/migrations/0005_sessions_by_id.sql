-- 0005: sessions found by id alone, for the one owner-blind read
-- (store.Sessions.SessionIDInUse: a subagent operation from another
-- owner's session is refused as unauthorized).

CREATE INDEX sessions_by_id ON sessions (id);
