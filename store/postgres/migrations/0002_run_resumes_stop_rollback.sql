-- 0002: what a run needs to survive its instance (SPEC §4) and to be
-- stopped by whoever runs it next: how often it was resumed, a stop that was
-- requested but not yet applied, and whether when_busy=rollback struck its
-- turn out of the transcript.
--
-- Additive with defaults, as every migration must be (decision 0022): an
-- older instance still running during a rolling upgrade names its columns
-- and never sees these.

ALTER TABLE runs
    ADD COLUMN resumes     integer NOT NULL DEFAULT 0,
    ADD COLUMN stop        text    NOT NULL DEFAULT '',
    ADD COLUMN rolled_back boolean NOT NULL DEFAULT false;
