-- Schedules and their fires (docs/schedules.md, ADR 0015). Small, low-churn, mutable
-- tables (DESIGN §1.3): the hot job path never touches them.
CREATE SCHEMA IF NOT EXISTS pgferry_sched;

CREATE TABLE pgferry_sched.schedules (
    id               bigserial PRIMARY KEY,
    tenant_id        bigint NOT NULL,
    name             text NOT NULL,
    -- Exactly one of cron / interval_ms.
    cron             text,
    interval_ms      bigint,
    timezone         text NOT NULL DEFAULT 'UTC',
    jitter_ms        bigint NOT NULL DEFAULT 0,
    start_at         timestamptz,
    end_at           timestamptz,
    paused           boolean NOT NULL DEFAULT false,
    -- What a fire starts: {"type":"job",...} or {"type":"workflow",...}; queues are the
    -- engine's (tenant-namespaced) names.
    target           jsonb NOT NULL,
    missed           text NOT NULL,
    catchup_window_ms bigint NOT NULL,
    catchup_max      int NOT NULL,
    overlap          text NOT NULL,
    grace_ms         bigint NOT NULL,
    -- The next nominal fire time; NULL once past end_at.
    next_fire_at     timestamptz,
    last_fire_at     timestamptz,
    last_job_id      bigint,
    -- overlap = buffer_one: the one fire waiting for the previous run to end.
    buffered_fire_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_one_timing CHECK ((cron IS NULL) <> (interval_ms IS NULL)),
    CONSTRAINT schedules_name UNIQUE (tenant_id, name)
);

-- The firer's scan: due, unpaused schedules in fire order.
CREATE INDEX schedules_due ON pgferry_sched.schedules (next_fire_at)
    WHERE NOT paused AND next_fire_at IS NOT NULL;
CREATE INDEX schedules_buffered ON pgferry_sched.schedules (id)
    WHERE buffered_fire_at IS NOT NULL;

-- One row per (schedule, nominal fire time): the primary key is what makes a fire happen
-- once, whichever leader (or backfill) gets there, however often it retries.
CREATE TABLE pgferry_sched.fires (
    schedule_id bigint NOT NULL REFERENCES pgferry_sched.schedules (id) ON DELETE CASCADE,
    fire_at     timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    -- fired | backfilled | missed | skipped | buffered
    outcome     text NOT NULL,
    job_id      bigint,
    reason      text,
    PRIMARY KEY (schedule_id, fire_at)
);
CREATE INDEX fires_recent ON pgferry_sched.fires (schedule_id, fire_at DESC);
