-- 0011: usage and budgets (docs/api.md "Budgets and usage"): a run's cost in US
-- dollars, summed over its model requests (NULL: none had a price), beside
-- the token counts it already had; the budget its user.message gave it, and
-- the session's own budget ({"tokens", "cost_usd"}, NULL: none).
--
-- Additive (decision 0022): an instance of the previous version names its
-- columns and never sees these.

ALTER TABLE runs ADD COLUMN cost_usd double precision;
ALTER TABLE runs ADD COLUMN budget jsonb;
ALTER TABLE sessions ADD COLUMN budget jsonb;
