-- Rein schema version 8: the approvals inbox and confirmation expiry.
--
-- expires_at (microseconds, NULL: never) is when an unanswered
-- confirmation is denied as "expired". owner and session_id copy the
-- session's key onto each confirmation so that one index orders an owner's
-- confirmations across all their sessions: the inbox (newest first, a page
-- after a position) reads one range of confirmations_inbox, whatever the
-- number of sessions or of confirmations in other statuses. Its status is
-- an expression of state (allowed, denied and started are "answered"), the
-- same text the inbox query compares (inboxStatusSQL in approvals.go).
-- confirmations_due holds only pending confirmations that expire, soonest
-- first: the next expiry is its first row.

ALTER TABLE confirmations ADD COLUMN expires_at INTEGER;
ALTER TABLE confirmations ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE confirmations ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
UPDATE confirmations SET
    owner = (SELECT s.owner FROM sessions s WHERE s.pk = confirmations.session_pk),
    session_id = (SELECT s.id FROM sessions s WHERE s.pk = confirmations.session_pk);

CREATE INDEX confirmations_inbox ON confirmations (
    owner,
    (CASE WHEN state IN ('allowed', 'denied', 'started') THEN 'answered' ELSE state END),
    created_at, session_id, tool_use_id);
CREATE INDEX confirmations_due ON confirmations (expires_at, owner, session_id, tool_use_id)
    WHERE state = 'pending' AND expires_at IS NOT NULL;
