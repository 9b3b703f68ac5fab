-- Job semantics on the log (issue 4): queue settings, cancellation, heartbeats.

-- Queue settings live in the database so every server applies the same ones; claimers pick
-- up changes within a second (lane cache refresh).
ALTER TABLE pgferry.queues
    ADD COLUMN paused          boolean NOT NULL DEFAULT false,
    ADD COLUMN backoff_base_ms int NOT NULL DEFAULT 1000
        CHECK (backoff_base_ms BETWEEN 0 AND 86400000),
    ADD COLUMN backoff_cap_ms  int NOT NULL DEFAULT 3600000
        CHECK (backoff_cap_ms BETWEEN 0 AND 604800000),
    ADD COLUMN retention_ms    bigint NOT NULL DEFAULT 0
        CHECK (retention_ms BETWEEN 0 AND 31536000000),
    ADD COLUMN aging_ms        int NOT NULL DEFAULT 60000
        CHECK (aging_ms BETWEEN 0 AND 86400000);

-- Cancellation requests. Small and mutable: a claim closes a cancelled pending job instead of
-- handing it out; a running one is told through NOTIFY pgferry_cancel and heartbeats.
-- A job cancelled while scheduled leaves `scheduled`; its row is kept here (lane .. args) so
-- get_job can still show it.
CREATE TABLE pgferry.cancels (
    job_id       bigint PRIMARY KEY,
    requested_at timestamptz NOT NULL DEFAULT now(),
    reason       text,
    lane         int,
    attempt      int,
    max_attempts int,
    kind         text,
    args         jsonb,
    meta         jsonb
);

-- Leases extended by heartbeats. The receipt's lease covers its batch; an attempt that
-- heartbeats gets its own row here, which the rescuer honours.
CREATE TABLE pgferry.long_leases (
    receipt_id  bigint NOT NULL,
    job_id      bigint NOT NULL,
    attempt     int NOT NULL,
    lane        int NOT NULL,
    rseg        smallint NOT NULL,
    segment     smallint NOT NULL,
    worker      text,
    lease_until timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX long_leases_due ON pgferry.long_leases (lease_until);

-- heartbeat(...) ------------------------------------------------------------------------------
-- Extends the leases of attempts a worker still holds; returns, per input position, whether
-- the attempt is still held (open under its receipt) and whether it was cancelled. Takes the
-- receipts' locks first, like complete() and the rescuer, so a rescue either sees the new
-- lease or has closed the attempt before the heartbeat looks (then `held` is false).
-- Arguments: aligned arrays of job ids, attempts, job segments, receipt ids, lanes, receipt
-- segments; the new lease in ms; the worker.
CREATE FUNCTION pgferry.heartbeat(
    p_job_ids bigint[], p_attempts int[], p_segments smallint[], p_receipts bigint[],
    p_lanes int[], p_rsegs smallint[], p_lease_ms int, p_worker text)
RETURNS TABLE (ord bigint, held boolean, cancelled boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (r & 2147483647)::int AS k FROM unnest(p_receipts) r ORDER BY 1) s;

    RETURN QUERY
    WITH o AS (
        SELECT *
          FROM unnest(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs)
               WITH ORDINALITY AS o(job_id, attempt, segment, receipt_id, lane, rseg, ord)
    ),
    held AS (
        SELECT k.receipt_id, u.job_id, u.attempt, u.segment
          FROM (SELECT DISTINCT o.receipt_id, o.lane, o.rseg FROM o) k
          CROSS JOIN LATERAL (
              SELECT rc.job_ids, rc.attempts, rc.job_segments
                FROM pgferry.receipts rc
               WHERE rc.segment = k.rseg AND rc.lane = k.lane AND rc.receipt_id = k.receipt_id
               LIMIT 1) r,
          unnest(r.job_ids, r.attempts, r.job_segments) AS u(job_id, attempt, segment)
    ),
    closed AS (
        SELECT c.receipt_id, u.job_id, u.attempt
          FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
         WHERE c.receipt_id = ANY (p_receipts) AND c.segment = ANY (p_segments)
    ),
    live AS (
        SELECT o.*
          FROM o
         WHERE (o.receipt_id, o.job_id, o.attempt, o.segment)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt, h.segment FROM held h)
           AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT c.receipt_id, c.job_id, c.attempt FROM closed c)
    ),
    up AS (
        INSERT INTO pgferry.long_leases (receipt_id, job_id, attempt, lane, rseg, segment,
                                         worker, lease_until)
        SELECT DISTINCT ON (l.job_id, l.attempt) l.receipt_id, l.job_id, l.attempt, l.lane,
               l.rseg, l.segment, p_worker, now() + p_lease_ms * interval '1 millisecond'
          FROM live l
        ON CONFLICT (job_id, attempt) DO UPDATE SET lease_until = EXCLUDED.lease_until,
                                                    worker = EXCLUDED.worker
        RETURNING job_id, attempt
    )
    SELECT o.ord,
           (o.job_id, o.attempt) IN (SELECT up.job_id, up.attempt FROM up),
           EXISTS (SELECT 1 FROM pgferry.cancels c WHERE c.job_id = o.job_id),
           now() + p_lease_ms * interval '1 millisecond'
      FROM o
     ORDER BY o.ord;
END
$fn$;

-- DLQ listing newest first with keyset pagination.
CREATE INDEX dead_died ON pgferry.dead (died_at DESC, job_id DESC);

-- Unique jobs: a key per queue held by one job. Released lazily: an enqueue that meets a
-- held key checks whether the holder still holds it (pending, scheduled or running; or
-- completed less than `period` ago) and takes the key over if not. Nothing on the hot path
-- (claim, complete) touches this table.
CREATE TABLE pgferry.unique_keys (
    queue      text NOT NULL,
    key        text NOT NULL,
    job_id     bigint NOT NULL,
    period_ms  bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);

-- Concurrency limits: at most `concurrency` attempts of a queue running at once, across every
-- server. Queues without a limit have no queue_running row and pay nothing: claims of a
-- limited queue go through claim_limited(); complete() and the rescuer decrement the counter
-- of limited queues only (a one-time EXISTS check skips the work when no queue is limited).
ALTER TABLE pgferry.queues
    ADD COLUMN concurrency int CHECK (concurrency IS NULL OR concurrency BETWEEN 1 AND 1000000);
CREATE TABLE pgferry.queue_running (
    queue_id int PRIMARY KEY REFERENCES pgferry.queues,
    running  int NOT NULL DEFAULT 0
);

-- claim_limited(queue, limit, lanes, max, worker, lease_ms): claim_lanes() under the queue's
-- counter row lock, taking no more than the free slots, and counting what it took.
CREATE FUNCTION pgferry.claim_limited(p_queue int, p_limit int, p_lanes int[], p_max int,
                                      p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint, lane int)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_running int;
    v_n       int;
BEGIN
    INSERT INTO pgferry.queue_running (queue_id) VALUES (p_queue) ON CONFLICT DO NOTHING;
    SELECT qr.running INTO v_running FROM pgferry.queue_running qr
     WHERE qr.queue_id = p_queue FOR UPDATE;
    IF v_running >= p_limit THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pgferry.claim_lanes(p_lanes, least(p_max, p_limit - v_running),
                                                   p_worker, p_lease_ms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        UPDATE pgferry.queue_running SET running = running + v_n WHERE queue_id = p_queue;
    END IF;
END
$fn$;
