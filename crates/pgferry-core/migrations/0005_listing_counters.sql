-- Listing by queue, per-queue counters (issue 4 "History and lookup"; ADR 0006).
--
-- Nothing here is read or written by enqueue, claim or complete: the indexes are on the
-- mutable side tables (scheduled, dead, cancels), whose writes are per-job anyway, and
-- lane_counters is written once per second per process (deltas) and by cold paths.

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
