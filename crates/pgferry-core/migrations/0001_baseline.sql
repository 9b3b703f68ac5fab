-- pgferry engine schema, baseline (docs/architecture.md; DESIGN §3.1–3.4).
--
-- This file is the squash of the engine's migrations 0001–0013 as they stood when the
-- engine's functions moved to src/sql/functions/ (ADR 0017): the tables, indexes and storage
-- settings those migrations left behind, in their final form. No installation outside test
-- clusters existed at the time. Functions are not here: each live function is defined once,
-- in its own file, and applied after the versioned migrations whenever its text changes
-- (migrate.rs). The history of each decision is in the ADRs the comments cite.
--
-- Hot tables (ready, receipts, completions, results, ticks) are LIST-partitioned by
-- `segment` into a ring of 16. Rows are only ever INSERTed; space comes back by TRUNCATE of
-- a whole segment once every job in it is closed (see rotate.rs). Mutable tables
-- (segments, queues, lanes, scheduled, dead, leader_state) are small or low-churn.

CREATE SCHEMA IF NOT EXISTS pgferry;

-- Queues and lanes ---------------------------------------------------------------------
-- A lane is (queue, priority, shard): the routing key every hot statement filters with `=`.
CREATE TABLE pgferry.queues (
    queue_id     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    shards       smallint NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 64),
    max_attempts int NOT NULL DEFAULT 25 CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_ms     int NOT NULL DEFAULT 60000 CHECK (lease_ms BETWEEN 100 AND 86400000),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Queue settings live in the database so every server applies the same ones; claimers
    -- pick up changes within a second (lane cache refresh).
    paused          boolean NOT NULL DEFAULT false,
    backoff_base_ms int NOT NULL DEFAULT 1000 CHECK (backoff_base_ms BETWEEN 0 AND 86400000),
    backoff_cap_ms  int NOT NULL DEFAULT 3600000 CHECK (backoff_cap_ms BETWEEN 0 AND 604800000),
    retention_ms    bigint NOT NULL DEFAULT 0 CHECK (retention_ms BETWEEN 0 AND 31536000000),
    aging_ms        int NOT NULL DEFAULT 60000 CHECK (aging_ms BETWEEN 0 AND 86400000),
    -- At most `concurrency` attempts running at once across every server (queue_running).
    concurrency     int CHECK (concurrency IS NULL OR concurrency BETWEEN 1 AND 1000000),
    -- Durability is a per-queue choice, default safe (DESIGN §1.7): with async_commit the
    -- hot-path writes (enqueue COPY, claim receipt, completion batch) commit with
    -- synchronous_commit = off. A batch that mixes queues commits synchronously if any of its
    -- queues does.
    async_commit    boolean NOT NULL DEFAULT false
);

CREATE TABLE pgferry.lanes (
    lane     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id int NOT NULL REFERENCES pgferry.queues,
    priority smallint NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 3),
    shard    smallint NOT NULL DEFAULT 0,
    UNIQUE (queue_id, priority, shard)
);

-- Segments -------------------------------------------------------------------------------
-- free -> current -> sealed -> freeing -> free. Exactly one is current; inserts read it once
-- per statement (an InitPlan), so a batch never straddles two segments. 'freeing': its
-- partitions are being detached, truncated and re-attached (rotator.rs); a crash in the
-- middle is repaired by the next rotation.
CREATE TABLE pgferry.segments (
    segment   smallint PRIMARY KEY,
    state     text NOT NULL CHECK (state IN ('free', 'current', 'sealed', 'freeing')),
    opened_at timestamptz,
    sealed_at timestamptz,
    -- Segment numbers are reused: a worker's handle names its job's segment, and once that
    -- segment was freed an outcome naming it must be stale even while its receipt, in a later
    -- segment, is still there. The truncating transaction records the highest receipt id
    -- issued so far: every receipt that can name an attempt of the freed incarnation is at or
    -- below it, every receipt of the next incarnation above it.
    reuse_floor bigint NOT NULL DEFAULT 0,
    -- Deferred: advancing swaps 'current' between two rows in one UPDATE.
    CONSTRAINT segments_one_current EXCLUDE ((state) WITH =) WHERE (state = 'current')
        DEFERRABLE INITIALLY DEFERRED
);
INSERT INTO pgferry.segments (segment, state, opened_at)
SELECT s, CASE WHEN s = 0 THEN 'current' ELSE 'free' END, CASE WHEN s = 0 THEN now() END
FROM generate_series(0, 15) AS s;

-- Ids are handed out in blocks: every nextval is a multiple of 256 and owns the 256 ids
-- from it (one block per lane of a COPY batch, ADR 0006). Statements that take one id per job
-- (unique and scheduled enqueues) simply use the first id of a block. 2^53 / 256 blocks last
-- a century at 10k blocks/s, and ids stay exact as JSON numbers.
CREATE SEQUENCE pgferry.job_id_seq INCREMENT BY 256 START WITH 256;
-- Order of rows inside one transaction; cursors order by (xid, seq). CACHE 1 on purpose:
-- the ticker reads last_value to notice that the log grew.
CREATE SEQUENCE pgferry.ready_seq;
CREATE SEQUENCE pgferry.receipt_seq;
CREATE SEQUENCE pgferry.tick_seq;

-- The ready log: one row per runnable job attempt.
CREATE TABLE pgferry.ready (
    segment      smallint NOT NULL,
    lane         int NOT NULL,
    xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq          bigint NOT NULL DEFAULT nextval('pgferry.ready_seq'),
    job_id       bigint NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    -- Finding a job's rows without indexing every row by job id (ADR 0006): fresh jobs are
    -- written by COPY with ids reserved in blocks of 256 and with seq = job_id. Only the
    -- first row of each block (its "anchor") is indexed by id; any other fresh row is found
    -- from its anchor, which shares its segment, lane and transaction: ready_claim (lane, xid,
    -- seq = job_id) then finds it exactly (ready_rows()). Every row written any other way
    -- (retries, promotions, DLQ retries, rescues, unique and scheduled enqueues) has
    -- by_id = true.
    by_id        boolean NOT NULL DEFAULT true
) PARTITION BY LIST (segment);
-- Claim reads (lane = $1, (xid, seq) > cursor) in index order and stops at LIMIT.
CREATE INDEX ready_claim ON pgferry.ready (lane, xid, seq);
CREATE INDEX ready_by_id ON pgferry.ready (job_id) WHERE by_id;

-- One row per claim batch. The newest receipt of a lane IS the lane's cursor; snapshots are
-- copied in (not referenced by tick id) so that ticks can be truncated with their segment.
CREATE TABLE pgferry.receipts (
    segment      smallint NOT NULL,
    receipt_id   bigint NOT NULL DEFAULT nextval('pgferry.receipt_seq'),
    lane         int NOT NULL,
    lo_snap      pg_snapshot NOT NULL,
    hi_snap      pg_snapshot NOT NULL,
    hi_tick      bigint NOT NULL,
    last_xid     xid8 NOT NULL,
    last_seq     bigint NOT NULL,
    exhausted    boolean NOT NULL,
    job_ids      bigint[] NOT NULL,
    attempts     int[] NOT NULL,
    job_segments smallint[] NOT NULL,
    worker       text,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz NOT NULL
) PARTITION BY LIST (segment);
CREATE INDEX receipts_cursor ON pgferry.receipts (lane, receipt_id DESC);
-- The rescuer scans receipt ids after its mark. BRIN, not B-tree: ids only grow, so BRIN is
-- exact enough and nearly free to maintain, and — unlike a B-tree on receipt_id — it cannot
-- supply ORDER BY receipt_id, so the planner can never answer a lane's cursor probe by
-- walking every lane's receipts backwards (seen with a B-tree when one lane dominated).
CREATE INDEX receipts_id ON pgferry.receipts USING brin (receipt_id) WITH (pages_per_range = 4);

-- Outcomes, one row per (receipt, job segment, outcome) of each complete() call: the
-- attempts it closes are the aligned arrays job_ids/attempts (errors and durations only when
-- some outcome has one). A batch of 200 successes is one row and one index entry, not 200
-- (ADR 0003: per-job rows were 40% of the hot path's time and WAL). Rows live in the segment
-- of the attempts' ready rows, so a segment is closed when the attempts counted here equal
-- its ready rows.
--
-- First outcome wins without a unique index: every attempt belongs to exactly one receipt,
-- and every writer of outcomes (complete(), the rescuer) first takes the receipt's advisory
-- lock (7267, receipt_id) and then, in a later statement with a fresh snapshot, skips the
-- attempts already closed under that receipt.
CREATE TABLE pgferry.completions (
    segment     smallint NOT NULL,
    receipt_id  bigint NOT NULL,
    outcome     smallint NOT NULL,
    job_ids     bigint[] NOT NULL,
    attempts    int[] NOT NULL,
    errors      text[],
    durations   int[],
    finished_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (segment);
-- Closed attempts of a receipt (complete(), rescue, lookups): one probe per receipt.
CREATE INDEX completions_receipt ON pgferry.completions (receipt_id);

-- Return values, only for jobs that produce one.
CREATE TABLE pgferry.results (
    segment smallint NOT NULL,
    job_id  bigint NOT NULL,
    attempt int NOT NULL,
    result  jsonb NOT NULL
) PARTITION BY LIST (segment);
CREATE INDEX results_job ON pgferry.results (job_id);

-- Visibility ticks written by the leader: the rows that became visible between two ticks
-- form a closed, immutable set (PgQ's batches).
CREATE TABLE pgferry.ticks (
    segment  smallint NOT NULL,
    tick_id  bigint NOT NULL,
    snap     pg_snapshot NOT NULL,
    seq_hi   bigint NOT NULL,
    -- The tick's own transaction: the next tick ignores it when looking for activity.
    own_xid  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    taken_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (segment);
CREATE INDEX ticks_id ON pgferry.ticks (tick_id DESC);

-- The ring's partitions and their storage settings --------------------------------------
-- Receipts and completions compress their per-job arrays inline (ADR 0009 §4): lz4, STORAGE
-- MAIN (compressed but kept in line unless a row still exceeds a page after compression) and
-- toast_tuple_target = 512. At a batch of 200 a receipt is 3,020 bytes, 931 compressed.
--
-- The log partitions are never vacuumed for their inserts (ADR 0011): space comes back by
-- TRUNCATE, the hot path never updates or deletes a log row, and no hot statement reads the
-- visibility map. Autoanalyze, dead-tuple vacuums and anti-wraparound vacuums are unchanged.
-- The reloption survives TRUNCATE, DETACH and ATTACH.
--
-- Free segments are detached (ADR 0009): a segment's five partitions are attached to their
-- parents only while the segment is in use (current, sealed or freeing), and for the one free
-- segment that opens next; every hot statement is a generic plan over the parent, and each
-- execution locks and starts an index scan in every attached partition.
--
-- Names are built from our own ring numbers and table list, not from input; -1 is the parent
-- (PG15 does not recurse these settings to existing partitions, so each gets them by name).
DO $$
DECLARE
    s int;
    t text;
    r text;
    c text;
BEGIN
    FOR s IN 0..15 LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            EXECUTE format('CREATE TABLE pgferry.%I PARTITION OF pgferry.%I FOR VALUES IN (%s)',
                           t || '_' || lpad(s::text, 2, '0'), t, s);
        END LOOP;
    END LOOP;
    FOR s IN -1..15 LOOP
        r := CASE WHEN s < 0 THEN 'receipts' ELSE 'receipts_' || lpad(s::text, 2, '0') END;
        c := CASE WHEN s < 0 THEN 'completions' ELSE 'completions_' || lpad(s::text, 2, '0') END;
        EXECUTE format('ALTER TABLE pgferry.%I ALTER COLUMN job_ids SET COMPRESSION lz4, '
                       'ALTER COLUMN attempts SET COMPRESSION lz4, '
                       'ALTER COLUMN job_segments SET COMPRESSION lz4', r);
        EXECUTE format('ALTER TABLE pgferry.%I ALTER COLUMN job_ids SET COMPRESSION lz4, '
                       'ALTER COLUMN attempts SET COMPRESSION lz4, '
                       'ALTER COLUMN errors SET COMPRESSION lz4, '
                       'ALTER COLUMN durations SET COMPRESSION lz4', c);
        EXECUTE format('ALTER TABLE ONLY pgferry.%I ALTER COLUMN job_ids SET STORAGE MAIN, '
                       'ALTER COLUMN attempts SET STORAGE MAIN, '
                       'ALTER COLUMN job_segments SET STORAGE MAIN', r);
        EXECUTE format('ALTER TABLE ONLY pgferry.%I ALTER COLUMN job_ids SET STORAGE MAIN, '
                       'ALTER COLUMN attempts SET STORAGE MAIN, '
                       'ALTER COLUMN errors SET STORAGE MAIN, '
                       'ALTER COLUMN durations SET STORAGE MAIN', c);
        IF s >= 0 THEN
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 512)', r);
            EXECUTE format('ALTER TABLE pgferry.%I SET (toast_tuple_target = 512)', c);
            FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
                EXECUTE format('ALTER TABLE pgferry.%I SET (autovacuum_vacuum_insert_threshold = -1, '
                               'toast.autovacuum_vacuum_insert_threshold = -1)',
                               t || '_' || lpad(s::text, 2, '0'));
            END LOOP;
        END IF;
    END LOOP;
    -- Segment 0 is current and 1 opens next; 2..15 start detached.
    FOR s IN 2..15 LOOP
        FOREACH t IN ARRAY ARRAY['ready', 'receipts', 'completions', 'results', 'ticks'] LOOP
            EXECUTE format('ALTER TABLE pgferry.%I DETACH PARTITION pgferry.%I',
                           t, t || '_' || lpad(s::text, 2, '0'));
        END LOOP;
    END LOOP;
END $$;

-- Mutable, low-churn side tables --------------------------------------------------------
-- Jobs whose run time is in the future (delayed retries, scheduled jobs).
CREATE TABLE pgferry.scheduled (
    job_id       bigint PRIMARY KEY,
    lane         int NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    run_at       timestamptz NOT NULL
);
CREATE INDEX scheduled_due ON pgferry.scheduled (run_at);

-- The dead-letter queue.
CREATE TABLE pgferry.dead (
    job_id       bigint PRIMARY KEY,
    lane         int NOT NULL,
    attempt      int NOT NULL,
    max_attempts int NOT NULL,
    kind         text NOT NULL,
    args         jsonb NOT NULL,
    meta         jsonb,
    error        text,
    died_at      timestamptz NOT NULL DEFAULT now()
);

-- Leader bookkeeping (one row).
CREATE TABLE pgferry.leader_state (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    rescue_mark bigint NOT NULL DEFAULT 0
);
INSERT INTO pgferry.leader_state DEFAULT VALUES;

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
    -- Long-lease hand-over (ADR 0008): when the oldest sealed segment is held open by attempts
    -- with a live long lease, the rotator copies what the attempt needs to finish without its
    -- segment into this row and marks it handed_over. From then on the row is the attempt's
    -- authority: complete(), heartbeat() and the rescuer record its outcome here (first
    -- outcome wins: UPDATE … WHERE outcome IS NULL), and the segment counts it as closed
    -- (handed_seg). A finished handed-over row stays as the attempt's history until the
    -- janitor prunes it after the retention.
    handed_over  boolean NOT NULL DEFAULT false,
    -- The segment that counts this attempt closed because of the hand-over; cleared in the
    -- transaction that truncates that segment (its number is then reused).
    handed_seg   smallint,
    max_attempts int,
    kind         text,
    args         jsonb,
    meta         jsonb,
    enqueued_at  timestamptz,
    claimed_at   timestamptz,
    -- Position of the attempt in its receipt's arrays (list_claimed.sql pages by it).
    receipt_pos  int,
    -- The outcome of a handed-over attempt (codes as in completions).
    outcome      smallint,
    error        text,
    result       jsonb,
    duration_ms  int,
    finished_at  timestamptz,
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX long_leases_due ON pgferry.long_leases (lease_until);
-- complete()/heartbeat(): is any attempt handed over, and which of these receipts' are.
-- Empty in a system without hour-long jobs: the hot path's gate is one probe of it.
CREATE INDEX long_leases_handed ON pgferry.long_leases (receipt_id) WHERE handed_over;
-- The rescuer's and the counters' open handed-over attempts.
CREATE INDEX long_leases_handed_open ON pgferry.long_leases (lane, lease_until)
    WHERE handed_over AND outcome IS NULL;
-- Segment closure: attempts a segment counts closed by hand-over.
CREATE INDEX long_leases_handed_seg ON pgferry.long_leases (handed_seg)
    WHERE handed_seg IS NOT NULL;

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

-- A unique key held by a job that finished after its hand-over (ADR 0008) must outlive the
-- job's log rows for the key's period: the janitor keeps such a job's long_leases row while a
-- key with an unexpired period names it (long_leases_prune.sql), probing keys by job id.
CREATE INDEX unique_keys_job ON pgferry.unique_keys (job_id);

-- Concurrency limits: at most `concurrency` attempts of a queue running at once, across every
-- server. Queues without a limit have no queue_running row and pay nothing: claims of a
-- limited queue go through claim_limited(); complete() and the rescuer decrement the counter
-- of limited queues only (a one-time EXISTS check skips the work when no queue is limited).
CREATE TABLE pgferry.queue_running (
    queue_id int PRIMARY KEY REFERENCES pgferry.queues,
    running  int NOT NULL DEFAULT 0
);

-- Listing and counters (ADR 0007) --------------------------------------------------------
-- A queue's scheduled jobs, newest first, per lane (list_jobs, counters' recount,
-- cancel_matching). Without it those walk every queue's scheduled jobs.
CREATE INDEX scheduled_lane ON pgferry.scheduled (lane, job_id);

-- A queue's dead jobs (recount, per-queue DLQ operations).
CREATE INDEX dead_lane ON pgferry.dead (lane, job_id);

-- Jobs cancelled while they waited in `scheduled` (the only rows of `cancels` with a lane):
-- for a queue's first attempts this row is all that is left of the job.
CREATE INDEX cancels_unscheduled ON pgferry.cancels (lane, job_id) WHERE lane IS NOT NULL;

-- Per-lane counters. `pending`, `running`, `scheduled` and `dead` are current sizes kept by
-- adding deltas; the leader's recount repairs them from the tables. The other columns are
-- monotonic totals (never recounted: history is truncated with its segment).
-- `version` is bumped by every write, so a recount can tell that nothing was added between
-- reading the truth and storing it.
CREATE TABLE pgferry.lane_counters (
    lane         int PRIMARY KEY REFERENCES pgferry.lanes,
    pending      bigint NOT NULL DEFAULT 0,
    running      bigint NOT NULL DEFAULT 0,
    scheduled    bigint NOT NULL DEFAULT 0,
    dead         bigint NOT NULL DEFAULT 0,
    enqueued     bigint NOT NULL DEFAULT 0,
    completed    bigint NOT NULL DEFAULT 0,
    failed       bigint NOT NULL DEFAULT 0,
    cancelled    bigint NOT NULL DEFAULT 0,
    version      bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    recounted_at timestamptz
);
