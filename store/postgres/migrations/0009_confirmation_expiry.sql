-- 0009: the approvals inbox and confirmation expiry.
--
-- expires_at (NULL: never) is when an unanswered confirmation is denied as
-- "expired" (state 'expired'). confirmations_inbox orders an owner's
-- confirmations by inbox status across all their sessions, newest first:
-- the inbox (a page after a position) reads one range of it whatever the
-- number of sessions or of confirmations in other statuses. The status is
-- an expression of state (allowed, denied and started are "answered"),
-- written in the inbox query exactly as here (inboxStatusSQL in
-- approvals.go). confirmations_due holds only pending confirmations that
-- expire, soonest first: the next expiry is its first entry.
--
-- Additive (decision 0022): an instance of the previous version names its
-- columns and never sees these; the confirmations it creates never expire.

ALTER TABLE confirmations ADD COLUMN expires_at timestamptz;
CREATE INDEX confirmations_inbox ON confirmations (
    owner,
    (CASE WHEN state IN ('allowed', 'denied', 'started') THEN 'answered' ELSE state END),
    created_at, session_id, tool_use_id);
CREATE INDEX confirmations_due ON confirmations (expires_at, owner, session_id, tool_use_id)
    WHERE state = 'pending' AND expires_at IS NOT NULL;
