-- enqueue(queue, kind, args, meta, priority, max_attempts, run_at): one job, written in the
-- caller's transaction, so it exists exactly when that transaction commits (a rollback leaves
-- nothing). For applications on Postgres that enqueue from SQL or any driver — node-postgres,
-- postgres.js, psycopg, an ORM — next to their own writes (the transactional outbox without
-- the outbox). Servers and the Rust engine write through their own faster paths (COPY,
-- group commit); this is the one-row path, as a retry or a promotion writes.
--
-- The same checks as the engine's (job.rs: NewJob::validate) with the same limits (the
-- payload measured as jsonb text, a few bytes over its compact JSON); each
-- error is SQLSTATE 22023 naming the field. `queue` is the engine's queue name: a tenant's
-- queue through the server is `pgferry.tenant_queue(tenant, queue)`.
--
-- Kept off the hot rows on purpose: it takes no lock another enqueuer waits for (the queue
-- and lane rows are created ON CONFLICT DO NOTHING, ids come from sequences) and writes no
-- counter row — the queue counts pick the job up at the next recount (ADR 0007) — so that
-- application transactions enqueueing into one queue never queue behind each other.
-- The row is found by id (by_id, ready_by_id); the tick after the COMMIT makes it claimable.
CREATE OR REPLACE FUNCTION pgferry.enqueue(
    p_queue text, p_kind text, p_args jsonb DEFAULT '{}', p_meta jsonb DEFAULT NULL,
    p_priority int DEFAULT 0, p_max_attempts int DEFAULT NULL, p_run_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_queue_id int;
    v_shards   int;
    v_max      int;
    v_lane     int;
    v_id       bigint;
BEGIN
    IF p_queue IS NULL OR length(p_queue) NOT BETWEEN 1 AND 64
       OR p_queue !~ '^[a-z0-9][a-z0-9_.-]*$' THEN
        RAISE EXCEPTION 'queue: % must be 1 to 64 characters of a-z, 0-9, ''_'', ''-'', ''.'', starting with a letter or digit', coalesce(quote_literal(left(p_queue, 80)), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_kind IS NULL OR length(p_kind) NOT BETWEEN 1 AND 128
       OR p_kind !~ '^[A-Za-z0-9_.:-]+$' THEN
        RAISE EXCEPTION 'kind: % must be 1 to 128 characters of A-Z, a-z, 0-9, ''_'', ''-'', ''.'', '':''', coalesce(quote_literal(left(p_kind, 80)), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_args IS NULL THEN
        RAISE EXCEPTION 'args: must not be NULL (send {} for none)' USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL OR p_priority NOT BETWEEN 0 AND 3 THEN
        RAISE EXCEPTION 'priority: % is not in 0..=3', p_priority USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts: % is not in 1..=1000', p_max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_args::text) + coalesce(octet_length(p_meta::text), 0) > 1048576 THEN
        RAISE EXCEPTION 'args: the job''s args and meta are over the limit of 1048576 bytes'
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO pgferry.queues (name) VALUES (p_queue) ON CONFLICT (name) DO NOTHING;
    SELECT q.queue_id, q.shards, q.max_attempts INTO v_queue_id, v_shards, v_max
      FROM pgferry.queues q WHERE q.name = p_queue;
    INSERT INTO pgferry.lanes (queue_id, priority, shard)
    SELECT v_queue_id, p_priority, s FROM generate_series(0, v_shards - 1) s
    ON CONFLICT (queue_id, priority, shard) DO NOTHING;

    v_id := nextval('pgferry.job_id_seq');
    -- Shards in turn by id (the engine's producers rotate over them too).
    SELECT l.lane INTO v_lane FROM pgferry.lanes l
     WHERE l.queue_id = v_queue_id AND l.priority = p_priority
       AND l.shard = (v_id % v_shards)::int;

    IF p_run_at IS NULL OR p_run_at <= now() THEN
        INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
        VALUES ((SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
                v_lane, v_id, 1, coalesce(p_max_attempts, v_max), p_kind, p_args, p_meta);
    ELSE
        INSERT INTO pgferry.scheduled (job_id, lane, attempt, max_attempts, kind, args, meta,
                                       run_at, first_run)
        VALUES (v_id, v_lane, 1, coalesce(p_max_attempts, v_max), p_kind, p_args, p_meta, p_run_at,
                true);
    END IF;
    -- Delivered at COMMIT (once per transaction, however many jobs): the leader's listener
    -- wakes its idle ticker, so the job is claimable within milliseconds (growth.rs).
    PERFORM pg_notify('pgferry_grew', '');
    RETURN v_id;
END
$fn$;
