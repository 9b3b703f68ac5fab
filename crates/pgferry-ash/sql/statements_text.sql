-- Normalised text of query ids seen for the first time (prepared only when the
-- pg_stat_statements extension exists in this database).
SELECT queryid AS query_id, left(query, 4096) AS text
FROM pg_stat_statements
WHERE queryid = ANY ($1::bigint[])
