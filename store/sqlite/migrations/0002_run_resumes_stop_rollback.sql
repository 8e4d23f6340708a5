-- Rein schema version 2: what a run needs to be resumed on another
-- instance and stopped durably (store.RunRecord Resumes, Stop, RolledBack).
-- Existing runs get the values of a run never resumed, stopped or rolled
-- back, which is what they were.

ALTER TABLE runs ADD COLUMN resumes     INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stop        TEXT    NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN rolled_back INTEGER NOT NULL DEFAULT 0;
