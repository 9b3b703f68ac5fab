-- A sample's data array as (combo, sessions): a negative element -n says the next combo was
-- seen n times; a combo without one was seen once.
CREATE OR REPLACE FUNCTION pgferry_ash.decode(data int[])
RETURNS TABLE (combo int, n int)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT data[i], CASE WHEN i > 1 AND data[i - 1] < 0 THEN -data[i - 1] ELSE 1 END
    FROM generate_subscripts(data, 1) AS i
    WHERE data[i] > 0
$$
