-- Empties the slot after the current period's (two periods old) and records the rotation;
-- run inside a transaction with a short lock_timeout. $1 the current period number.
WITH t AS (
    SELECT pgferry_ash.truncate_slot((($1::bigint + 1) % 3)::int)
)
UPDATE pgferry_ash.ring SET rotated = $1::bigint FROM t
