-- One sample taken inside the database, for the pg_cron mode (docs/ash.md): the same read of
-- pg_stat_activity, dictionaries, encoding, ring rotation and rollups as the server's
-- sampler (src/sampler.rs), in one call. pgferry's backends are attributed to their queue,
-- job kind and tenant from what the running servers published (pgferry_ash.published, at
-- the same wall-clock-aligned ticks: the sample waits 25 ms for their snapshots), else to
-- their role by application_name. Parallel workers take their leader's attribution.
-- Returns the backends sampled.
CREATE OR REPLACE FUNCTION pgferry_ash.take_sample(interval_ms int DEFAULT 1000,
                                                   databases text[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_rows jsonb;
    v_data int[];
    v_locks int[];
    v_sampled int;
    v_period bigint;
    v_rotated bigint;
    v_timeout text := current_setting('lock_timeout');
BEGIN
    IF interval_ms NOT BETWEEN 100 AND 60000 THEN
        RAISE EXCEPTION 'pgferry_ash.take_sample: interval_ms % is outside 100..60000',
            interval_ms USING ERRCODE = '22023';
    END IF;
    -- The one read of pg_stat_activity (as sql/read_activity.sql), with each backend's wait
    -- as ASH reports it and its blockers reduced to those it is not queued behind another
    -- of (src/sampler.rs, reduce_blockers).
    WITH a AS MATERIALIZED (
        SELECT pid, coalesce(datname, '') AS datname, coalesce(usename, '') AS usename,
               coalesce(application_name, '') AS app, coalesce(backend_type, '') AS btype,
               CASE
                   WHEN state LIKE 'idle in transaction%' THEN 'IdleTx'
                   WHEN state = 'idle' THEN 'Idle'
                   WHEN wait_event_type IS NOT NULL THEN wait_event_type
                   ELSE 'CPU'
               END AS wt,
               CASE
                   WHEN state LIKE 'idle in transaction%' THEN state
                   WHEN state = 'idle' THEN 'idle'
                   WHEN wait_event_type IS NOT NULL THEN coalesce(wait_event, '')
                   ELSE 'CPU'
               END AS we,
               nullif(query_id, 0) AS qid, left(query, 4096) AS qtext,
               extract(epoch FROM query_start)::float8 AS qs,
               nullif(leader_pid, pid) AS lpid,
               coalesce(CASE WHEN wait_event_type = 'Lock' THEN pg_blocking_pids(pid) END,
                        '{}') AS blockers,
               (state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')
                OR (state IS NULL AND backend_type <> 'client backend'
                    AND wait_event_type IS DISTINCT FROM 'Activity')) AS sampled
        FROM pg_stat_activity
        WHERE pid <> pg_backend_pid()
          AND (databases IS NULL OR datname = ANY (databases))
    ), kept AS (
        SELECT a.*,
               CASE WHEN cardinality(a.blockers) > 1 THEN ARRAY(
                   SELECT x FROM unnest(a.blockers) x
                   WHERE NOT EXISTS (SELECT FROM a o
                                     WHERE o.pid = x AND o.blockers && a.blockers))
               ELSE a.blockers END AS by
        FROM a
        WHERE a.sampled OR a.pid IN (SELECT unnest(blockers) FROM a)
    )
    SELECT coalesce(jsonb_agg(to_jsonb(kept)), '[]') INTO v_rows FROM kept;

    -- pgferry backends: what the servers published for them (sql/functions/
    -- 17_published_serving.sql), as srole / squeue / skind.
    IF EXISTS (SELECT FROM jsonb_to_recordset(v_rows) AS r (app text)
               WHERE r.app LIKE 'pgferry-%') THEN
        PERFORM pg_sleep(0.025);
        -- Rows of servers gone past the TTL (as SamplerConfig::ttl: 10 s, two intervals).
        DELETE FROM pgferry_ash.published
        WHERE at < clock_timestamp() - greatest(interval '10 seconds',
                                                make_interval(secs => interval_ms / 500.0));
        SELECT coalesce(jsonb_agg(CASE WHEN m.pid IS NULL THEN x.r
                                       ELSE x.r || jsonb_build_object('srole', m.role,
                                                                      'squeue', m.queue,
                                                                      'skind', m.kind)
                                  END), '[]')
        INTO v_rows
        FROM jsonb_array_elements(v_rows) AS x (r)
        LEFT JOIN pgferry_ash.published_serving(
            ARRAY(SELECT r.pid FROM jsonb_to_recordset(v_rows) AS r (pid int, app text)
                  WHERE r.app LIKE 'pgferry-%' ORDER BY r.pid),
            ARRAY(SELECT r.qs FROM jsonb_to_recordset(v_rows) AS r (pid int, app text, qs float8)
                  WHERE r.app LIKE 'pgferry-%' ORDER BY r.pid)) m
          ON m.pid = (x.r->>'pid')::int;
    END IF;
    -- Parallel workers work for their leader's query: they take its attribution, and its
    -- application name and query id when they have none (as src/sampler.rs).
    IF EXISTS (SELECT FROM jsonb_to_recordset(v_rows) AS r (lpid int) WHERE r.lpid IS NOT NULL)
    THEN
        SELECT coalesce(jsonb_agg(CASE WHEN l.r IS NULL THEN w.r
            ELSE w.r || jsonb_strip_nulls(jsonb_build_object(
                'srole', coalesce(w.r->'srole', l.r->'srole'),
                'squeue', coalesce(w.r->'squeue', l.r->'squeue'),
                'skind', coalesce(w.r->'skind', l.r->'skind')))
                     || jsonb_build_object(
                'app', CASE WHEN w.r->>'app' = '' THEN l.r->'app' ELSE w.r->'app' END,
                'qid', CASE WHEN w.r->>'qid' IS NULL THEN l.r->'qid' ELSE w.r->'qid' END)
            END), '[]')
        INTO v_rows
        FROM jsonb_array_elements(v_rows) AS w (r)
        LEFT JOIN jsonb_array_elements(v_rows) AS l (r)
          ON (w.r->>'lpid')::int = (l.r->>'pid')::int;
    END IF;

    -- Dictionaries: what is new is inserted (entries are never deleted).
    INSERT INTO pgferry_ash.wait_event (type, event)
    SELECT DISTINCT r.wt, r.we FROM jsonb_to_recordset(v_rows) AS r (wt text, we text)
    ON CONFLICT DO NOTHING;
    INSERT INTO pgferry_ash.label (kind, name)
    SELECT DISTINCT l.k::"char", l.n
    FROM jsonb_to_recordset(v_rows) AS r (datname text, usename text, app text, btype text),
         LATERAL (VALUES ('d', r.datname), ('u', r.usename), ('a', r.app), ('b', r.btype))
             AS l (k, n)
    WHERE l.n <> ''
    ON CONFLICT DO NOTHING;
    INSERT INTO pgferry_ash.query (query_id, text)
    SELECT DISTINCT ON (r.qid) r.qid, r.qtext
    FROM jsonb_to_recordset(v_rows) AS r (qid bigint, qtext text)
    WHERE r.qid IS NOT NULL
    ON CONFLICT (query_id) DO NOTHING;

    INSERT INTO pgferry_ash.serving (role, queue, kind)
    SELECT DISTINCT r.srole, r.squeue, r.skind
    FROM jsonb_to_recordset(v_rows) AS r (srole text, squeue text, skind text)
    WHERE r.srole IS NOT NULL
    ON CONFLICT DO NOTHING;

    -- Each backend's combo. Two statements: the combos inserted by the first are invisible
    -- to its own query.
    INSERT INTO pgferry_ash.combo (wait_id, query_ref, database_id, user_id, app_id,
                                   backend_id, serving_id)
    SELECT DISTINCT r.wait_id, r.query_ref, r.database_id, r.user_id, r.app_id, r.backend_id,
                    r.serving_id
    FROM pgferry_ash.activity_ids(v_rows) r
    ON CONFLICT DO NOTHING;
    CREATE TEMP TABLE IF NOT EXISTS ash_backend (pid int, sampled bool, by int[], combo int)
        ON COMMIT DELETE ROWS;
    DELETE FROM pg_temp.ash_backend;
    INSERT INTO pg_temp.ash_backend
    SELECT r.pid, r.sampled, r.by, c.id
    FROM pgferry_ash.activity_ids(v_rows) r
    JOIN pgferry_ash.combo c
      ON (c.wait_id, c.query_ref, c.database_id, c.user_id, c.app_id, c.backend_id,
          c.serving_id)
       = (r.wait_id, r.query_ref, r.database_id, r.user_id, r.app_id, r.backend_id,
          r.serving_id);

    -- data: combo ids sorted, a run of n > 1 preceded by -n (src/encode.rs).
    SELECT coalesce(array_agg(u.v ORDER BY g.combo, u.o), '{}')
    INTO v_data
    FROM (SELECT t.combo, count(*)::int AS n FROM pg_temp.ash_backend t WHERE t.sampled
          GROUP BY t.combo) g,
         unnest(CASE WHEN g.n > 1 THEN ARRAY[-g.n, g.combo] ELSE ARRAY[g.combo] END)
             WITH ORDINALITY AS u (v, o);
    SELECT count(*) INTO v_sampled FROM pg_temp.ash_backend t WHERE t.sampled;

    -- locks: a group per backend that blocks others (or waits for nobody), and one per set
    -- of waiters that block nobody with the same combo and blockers.
    WITH e AS (
        SELECT t.* FROM pg_temp.ash_backend t
        WHERE cardinality(t.by) > 0
           OR t.pid IN (SELECT unnest(x.by) FROM pg_temp.ash_backend x)
    ), roots AS (
        SELECT e.pid AS who, e.combo, e.by FROM e
        WHERE cardinality(e.by) = 0 OR e.pid IN (SELECT unnest(x.by) FROM e x)
    ), leaves AS (
        SELECT -count(*)::int AS who, s.combo, s.by
        FROM (SELECT e.combo, ARRAY(SELECT unnest(e.by) ORDER BY 1) AS by FROM e
              WHERE cardinality(e.by) > 0
                AND e.pid NOT IN (SELECT unnest(x.by) FROM e x)) s
        GROUP BY s.combo, s.by
    ), groups AS (
        SELECT 0 AS part, g.who, g.combo, g.by FROM roots g
        UNION ALL
        SELECT 1, g.who, g.combo, g.by FROM leaves g
    )
    SELECT array_agg(u.v ORDER BY g.part, g.combo, g.who, u.o)
    INTO v_locks
    FROM groups g,
         unnest(ARRAY[g.who, g.combo, cardinality(g.by)] || g.by) WITH ORDINALITY AS u (v, o);

    -- The row (as sql/insert_sample.sql).
    WITH r AS (
        SELECT floor(extract(epoch FROM now()) / extract(epoch FROM period))::bigint AS p,
               ring.rotated
        FROM pgferry_ash.ring
    ), ins AS (
        INSERT INTO pgferry_ash.sample (slot, interval_ms, at, data, locks)
        SELECT (r.p % 3)::smallint, take_sample.interval_ms, now(), v_data, v_locks FROM r
    )
    SELECT r.p, r.rotated INTO v_period, v_rotated FROM r;

    -- Rotation when a new period started (as sql/rotate.sql), never waiting on readers for
    -- more than 50 ms: behind a reader it gives up and the next sample retries.
    IF v_rotated IS NULL OR v_rotated < v_period THEN
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            PERFORM pgferry_ash.truncate_slot(((v_period + 1) % 3)::int);
            UPDATE pgferry_ash.ring SET rotated = v_period;
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'pgferry_ash: rotation waited past its lock timeout; retrying';
        END;
        PERFORM set_config('lock_timeout', v_timeout, true);
    END IF;

    -- Rollups when a minute completed (the same statements as sql/rollup_*.sql).
    IF (SELECT s.minute_to IS DISTINCT FROM date_trunc('minute', now(), 'UTC')
        FROM pgferry_ash.rollup_state s) THEN
        PERFORM pgferry_ash.roll_up();
    END IF;
    RETURN v_sampled;
END $$
