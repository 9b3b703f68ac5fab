-- Without pg_stat_statements: the text a backend ran when its query id was first seen.
SELECT DISTINCT ON (query_id) query_id, left(query, 4096) AS text
FROM pg_stat_activity
WHERE query_id = ANY ($1::bigint[])
