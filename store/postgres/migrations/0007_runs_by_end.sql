-- 0007: runs found by when they ended, so that catching up on recent ends
-- after a restart (store.Runs.ListEndedSince, subagent reconciliation)
-- reads those runs only, not every run ever stored.

CREATE INDEX runs_by_end ON runs (ended_at, id);
