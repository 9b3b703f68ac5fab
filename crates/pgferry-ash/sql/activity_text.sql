-- Without pg_stat_statements: the text a backend ran when its query id was first seen.
-- A backend running it now is preferred over an idle one whose last statement had the same
-- id (same normalised statement, other constants: the sampled backend's own text is the one
-- its sample was taken with).
SELECT DISTINCT ON (query_id) query_id, left(query, 4096) AS text
FROM pg_stat_activity
WHERE query_id = ANY ($1::bigint[])
ORDER BY query_id, (state = 'active') DESC, query_start DESC
