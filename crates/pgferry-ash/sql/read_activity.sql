-- The one read of pg_stat_activity per sample. Sampled: client backends that are active or
-- idle in a transaction, and background processes that are not parked in their main loop
-- (wait type Activity). Backends that block a sampled one are returned too (flag
-- sampled = false) so a blocking chain can name its root even when the root is idle.
-- pg_blocking_pids takes the lock manager's locks, so it runs only for lock waiters.
-- query_start (epoch seconds) lets other servers' published operations vouch for a backend
-- (sql/functions/17_published_serving.sql); leader_pid groups parallel workers under the
-- backend they work for (NULL for the leader itself).
-- $1: database names to sample, or NULL for all.
WITH a AS MATERIALIZED (
    SELECT pid, datname, usename, application_name, backend_type, state,
           wait_event_type, wait_event, query_id,
           extract(epoch FROM query_start)::float8 AS query_start, leader_pid,
           CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) END AS blockers,
           (state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')
            OR (state IS NULL AND backend_type <> 'client backend'
                AND wait_event_type IS DISTINCT FROM 'Activity')) AS sampled
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid()
      AND ($1::text[] IS NULL OR datname = ANY ($1::text[]))
)
SELECT pid, coalesce(datname, '') AS datname, coalesce(usename, '') AS usename,
       coalesce(application_name, '') AS application_name,
       coalesce(backend_type, '') AS backend_type, coalesce(state, '') AS state,
       wait_event_type, wait_event, query_id, query_start,
       nullif(leader_pid, pid) AS leader_pid, blockers, sampled
FROM a
WHERE sampled OR pid IN (SELECT unnest(blockers) FROM a)
