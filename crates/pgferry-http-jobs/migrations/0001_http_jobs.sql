-- Per-tenant settings and state of HTTP jobs (docs/http-jobs.md). Small, low-churn tables:
-- the worker reads a tenant's settings once per claimed batch and writes destination state
-- only when a destination's outcome changes.
CREATE SCHEMA IF NOT EXISTS pgferry_http;

-- Signing secrets: every active secret of a tenant signs each request (one `v1` each), so
-- a new key is added, receivers learn it, then the old one is deleted: no downtime. At
-- most two per tenant (enforced by the API in one statement). Kept in clear text: the
-- server must sign with them (like pgferry.server_secrets).
CREATE TABLE pgferry_http.signing_secrets (
    id          bigserial PRIMARY KEY,
    tenant_id   bigint NOT NULL,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signing_secrets_tenant ON pgferry_http.signing_secrets (tenant_id, id);

-- Ranges a tenant's HTTP jobs may reach beyond the public internet, on top of the
-- server's --http-jobs-allow.
CREATE TABLE pgferry_http.allow_lists (
    tenant_id   bigint PRIMARY KEY,
    ranges      text[] NOT NULL DEFAULT '{}',
    cidrs       text[] NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Request rate per destination key (host:port, or the job's group).
CREATE TABLE pgferry_http.rate_limits (
    tenant_id   bigint NOT NULL,
    destination text NOT NULL,
    per_sec     double precision NOT NULL CHECK (per_sec > 0),
    burst       int NOT NULL CHECK (burst >= 1),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, destination)
);

-- The last attempt outcome per destination key: what a transition is measured against.
CREATE TABLE pgferry_http.destinations (
    tenant_id   bigint NOT NULL,
    destination text NOT NULL,
    ok          boolean NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, destination)
);

-- Failure (first failed attempt after success) and recovery (first success after
-- failures) of a destination key.
CREATE TABLE pgferry_http.transitions (
    id          bigserial PRIMARY KEY,
    tenant_id   bigint NOT NULL,
    destination text NOT NULL,
    -- failure | recovery
    kind        text NOT NULL,
    job_id      bigint NOT NULL,
    status      int,
    error       text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transitions_tenant ON pgferry_http.transitions (tenant_id, id DESC);
