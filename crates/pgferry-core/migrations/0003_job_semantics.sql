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
CREATE TABLE pgferry.cancels (
    job_id       bigint PRIMARY KEY,
    requested_at timestamptz NOT NULL DEFAULT now(),
    reason       text
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
