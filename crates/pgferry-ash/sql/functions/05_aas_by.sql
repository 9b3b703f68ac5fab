-- Average active sessions over [since, until) by one dimension: wait_type, wait_event,
-- query, database, user, application, pgferry_role, backend_type, and for pgferry's own
-- backends queue, job_kind, tenant ('' for the load of everything else). aas is over the
-- seconds the sampler covered; db_time_pct is the share of all session-seconds
-- (idle sessions are never sampled, so it is % of DB time, not % of waits).
-- for_tenant (a tenant id, as in combo_named.tenant) scopes the three tenant-owned
-- dimensions to one tenant: queue, job_kind and tenant keep their names only for that
-- tenant's load; other attributed load is one '(other tenants)' slice, so a tenant's reader
-- sees how busy the database is without another tenant's queue or job names. NULL: the
-- database-wide view of an operator.
-- The signature gained for_tenant: the three-argument function is replaced, not overloaded.
DROP FUNCTION IF EXISTS pgferry_ash.aas_by(text, timestamptz, timestamptz);
CREATE OR REPLACE FUNCTION pgferry_ash.aas_by(dimension text, since timestamptz,
                                              until timestamptz, for_tenant text DEFAULT NULL)
RETURNS TABLE (key text, seconds float8, aas float8, db_time_pct float8)
LANGUAGE plpgsql STABLE
-- Row estimates through the nested set-returning functions are far too high, and JIT
-- then costs a second per call (measured: 1.37 s, 1 ms without).
SET jit = off
AS $$
BEGIN
    IF dimension NOT IN ('wait_type', 'wait_event', 'query', 'database', 'user',
                         'application', 'pgferry_role', 'backend_type', 'queue',
                         'job_kind', 'tenant') THEN
        RAISE EXCEPTION 'pgferry_ash.aas_by: unknown dimension %', dimension
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH l AS (
        SELECT x.combo, sum(x.seconds) AS seconds
        FROM pgferry_ash.load_at(since, until, interval '1 hour') x
        GROUP BY x.combo
    ), tot AS (
        SELECT coalesce(sum(l.seconds) FILTER (WHERE l.combo = 0), 0) AS covered,
               coalesce(sum(l.seconds) FILTER (WHERE l.combo <> 0), 0) AS busy
        FROM l
    ), raw AS (
        SELECT CASE dimension
                   WHEN 'wait_type' THEN n.wait_type
                   WHEN 'wait_event' THEN n.wait_type || ':' || n.wait_event
                   WHEN 'query' THEN coalesce(n.query_id::text, '')
                   WHEN 'database' THEN n.database
                   WHEN 'user' THEN n.user_name
                   WHEN 'application' THEN n.application
                   WHEN 'pgferry_role' THEN coalesce(n.pgferry_role, '')
                   WHEN 'queue' THEN coalesce(n.queue, '')
                   WHEN 'job_kind' THEN coalesce(n.job_kind, '')
                   WHEN 'tenant' THEN coalesce(n.tenant, '')
                   ELSE n.backend_type
               END AS key,
               n.tenant,
               l.seconds
        FROM l
        JOIN pgferry_ash.combo_named n ON n.combo = l.combo
    ), k AS (
        -- '' is unattributed load (not pgferry's, or no single queue or kind): it names
        -- nothing, so it stays as it is.
        SELECT CASE WHEN for_tenant IS NULL
                      OR dimension NOT IN ('queue', 'job_kind', 'tenant')
                      OR raw.key = ''
                      OR raw.tenant = for_tenant THEN raw.key
                    ELSE '(other tenants)'
               END AS key,
               raw.seconds
        FROM raw
    )
    SELECT k.key, sum(k.seconds),
           sum(k.seconds) / nullif(tot.covered, 0),
           100 * sum(k.seconds) / nullif(tot.busy, 0)
    FROM k, tot
    GROUP BY k.key, tot.covered, tot.busy
    ORDER BY 2 DESC, 1;
END $$
