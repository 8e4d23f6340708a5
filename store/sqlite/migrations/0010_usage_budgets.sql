-- Rein schema version 10: usage and budgets (docs/api.md "Budgets and usage"). A run's
-- cost in US dollars, summed over its model requests (NULL: none had a
-- price), beside the token counts it already had; the budget its
-- user.message gave it, and the session's own budget (JSON objects
-- {"tokens", "cost_usd"}, NULL: none).

ALTER TABLE runs ADD COLUMN cost_usd REAL;
ALTER TABLE runs ADD COLUMN budget TEXT;
ALTER TABLE sessions ADD COLUMN budget TEXT;
