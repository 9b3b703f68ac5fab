-- Tenancy and API keys (DESIGN.md §3.7). Cold tables: read on an auth-cache miss (every few
-- seconds per key), written by operators and, at most every few minutes per key, by
-- `last_used_at` bookkeeping.
--
-- Queues are not re-keyed by tenant: the server maps (tenant, queue) to an engine queue
-- name `t<tenant_id>.<queue>` (docs/adr/0003-tenant-queue-namespacing.md), so the hot path
-- keeps filtering by lane alone.

CREATE TABLE pgferry.tenants (
    tenant_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Shown in logs, metrics labels and the CLI; boring on purpose.
    name       text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A key is `pgf_<prefix>_<secret>`. Only the prefix (to find the row) and the SHA-256 of
-- the secret are stored; the secret is printed once at creation.
CREATE TABLE pgferry.api_keys (
    key_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     bigint NOT NULL REFERENCES pgferry.tenants,
    prefix        text NOT NULL UNIQUE CHECK (prefix ~ '^[0-9a-f]{12}$'),
    secret_sha256 text NOT NULL CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    scopes        text[] NOT NULL
                  CHECK (scopes <@ ARRAY['produce', 'consume', 'read', 'admin']::text[]),
    label         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    -- Written at most every few minutes per key (auth.rs), never per request.
    last_used_at  timestamptz
);
CREATE INDEX api_keys_tenant ON pgferry.api_keys (tenant_id);

-- Who did what: tenant and key management, queue settings, DLQ retries and purges.
CREATE TABLE pgferry.audit_log (
    audit_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    tenant_id bigint REFERENCES pgferry.tenants,
    -- The acting key, or NULL for the CLI (operator with database access).
    key_id    bigint REFERENCES pgferry.api_keys,
    actor     text NOT NULL,
    action    text NOT NULL,
    target    text,
    detail    jsonb
);
CREATE INDEX audit_log_tenant ON pgferry.audit_log (tenant_id, audit_id);

-- Secrets shared by every server of one database (e.g. the key that signs the attempt
-- tokens handed to HTTP workers, so a worker may claim on one server and complete on another).
CREATE TABLE pgferry.server_secrets (
    name       text PRIMARY KEY,
    secret     bytea NOT NULL CHECK (length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
