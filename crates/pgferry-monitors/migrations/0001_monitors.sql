-- Monitors, alerts, notification targets and inbound webhooks (docs/monitors.md).
-- Small, low-churn tables except pings and webhook events, which are bounded per owner.
CREATE SCHEMA IF NOT EXISTS pgferry_mon;

-- Where a tenant's alerts go: each matching target gets an HTTP job per event.
CREATE TABLE pgferry_mon.targets (
    id         bigserial PRIMARY KEY,
    tenant_id  bigint NOT NULL,
    name       text NOT NULL,
    url        text NOT NULL,
    -- Event kinds ("monitor.late") or families ("monitor.*"); empty: every event.
    events     text[] NOT NULL DEFAULT '{}',
    enabled    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT targets_name UNIQUE (tenant_id, name)
);

-- Heartbeat monitors (dead-man switches).
CREATE TABLE pgferry_mon.monitors (
    id                bigserial PRIMARY KEY,
    tenant_id         bigint NOT NULL,
    name              text NOT NULL,
    -- The secret of the unauthenticated ping URL.
    token             text NOT NULL UNIQUE,
    -- Exactly one of period_ms / cron.
    period_ms         bigint,
    cron              text,
    timezone          text NOT NULL DEFAULT 'UTC',
    grace_ms          bigint NOT NULL,
    failure_threshold int NOT NULL DEFAULT 1,
    -- new | up | late | down | paused
    state             text NOT NULL DEFAULT 'new',
    -- When the monitor is late unless a ping comes first; NULL: nothing expected.
    due_at            timestamptz,
    -- A run announced by /start and not finished yet.
    started_at        timestamptz,
    consecutive_failures int NOT NULL DEFAULT 0,
    last_ping_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT monitors_one_timing CHECK ((period_ms IS NULL) <> (cron IS NULL)),
    CONSTRAINT monitors_name UNIQUE (tenant_id, name)
);
-- The duty's scan: monitors whose deadline passed, in deadline order.
CREATE INDEX monitors_due ON pgferry_mon.monitors (due_at) WHERE due_at IS NOT NULL;

-- The latest pings of each monitor (older ones are deleted as new ones arrive).
CREATE TABLE pgferry_mon.pings (
    id         bigserial PRIMARY KEY,
    monitor_id bigint NOT NULL REFERENCES pgferry_mon.monitors (id) ON DELETE CASCADE,
    -- success | start | fail
    kind       text NOT NULL,
    at         timestamptz NOT NULL,
    body       text
);
CREATE INDEX pings_recent ON pgferry_mon.pings (monitor_id, id DESC);

-- Every alert raised (monitor or schedule), with its reason.
CREATE TABLE pgferry_mon.alerts (
    id           bigserial PRIMARY KEY,
    tenant_id    bigint NOT NULL,
    -- monitor | schedule
    subject_type text NOT NULL,
    subject      text NOT NULL,
    -- late | failed | recovered
    kind         text NOT NULL,
    reason       text NOT NULL,
    at           timestamptz NOT NULL,
    details      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX alerts_recent ON pgferry_mon.alerts (tenant_id, subject_type, subject, id DESC);

-- Each schedule's health as a monitor: up, late (a fire missed) or down (skipped, failed).
CREATE TABLE pgferry_mon.schedule_health (
    schedule_id  bigint PRIMARY KEY REFERENCES pgferry_sched.schedules (id) ON DELETE CASCADE,
    state        text NOT NULL DEFAULT 'up',
    -- The fire that made it unhealthy: only a later good fire recovers it.
    bad_fire_at  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- Fired fires whose job has not finished yet: checked each pass until it has.
CREATE TABLE pgferry_mon.schedule_runs (
    schedule_id bigint NOT NULL REFERENCES pgferry_sched.schedules (id) ON DELETE CASCADE,
    fire_at     timestamptz NOT NULL,
    job_id      bigint NOT NULL,
    PRIMARY KEY (schedule_id, fire_at)
);
-- How far the watcher has read the fires (by recorded_at); one row.
-- (recorded_at, schedule_id, fire_at) of the last fire read: a total order, so a page
-- boundary inside one firer transaction's fires (one recorded_at) loses nothing.
CREATE TABLE pgferry_mon.fire_cursor (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    recorded_at timestamptz NOT NULL,
    schedule_id bigint NOT NULL,
    fire_at     timestamptz NOT NULL
);
INSERT INTO pgferry_mon.fire_cursor (recorded_at, schedule_id, fire_at)
VALUES (now(), 0, 'epoch');
-- The watcher reads fires in recording order (additive index on the schedules' table).
CREATE INDEX IF NOT EXISTS fires_recorded
    ON pgferry_sched.fires (recorded_at, schedule_id, fire_at);

-- Inbound webhook endpoints: POST /in/{slug} (slugs are global: the URL has no tenant).
CREATE TABLE pgferry_mon.endpoints (
    id              bigserial PRIMARY KEY,
    tenant_id       bigint NOT NULL,
    slug            text NOT NULL UNIQUE,
    -- Signature verification (NULL: none): scheme hmac_sha256 (GitHub style) or stripe.
    sig_scheme      text,
    sig_header      text,
    sig_secret      text,
    -- The header carrying the provider's event id (dedup); NULL: no dedup.
    event_id_header text,
    targets         text[] NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX endpoints_tenant ON pgferry_mon.endpoints (tenant_id, slug);

CREATE TABLE pgferry_mon.events (
    id                bigserial PRIMARY KEY,
    endpoint_id       bigint NOT NULL REFERENCES pgferry_mon.endpoints (id) ON DELETE CASCADE,
    received_at       timestamptz NOT NULL DEFAULT now(),
    provider_event_id text,
    headers           jsonb NOT NULL,
    body              text NOT NULL
);
CREATE INDEX events_page ON pgferry_mon.events (endpoint_id, id);
CREATE INDEX events_since ON pgferry_mon.events (endpoint_id, received_at);
CREATE UNIQUE INDEX events_dedup ON pgferry_mon.events (endpoint_id, provider_event_id)
    WHERE provider_event_id IS NOT NULL;
