-- Idempotency keys of enqueue requests (issue 17, ADR 0012): a producer that saw an
-- ambiguous failure (a dropped connection, a 503) retries with the same key and gets the
-- first answer instead of writing the jobs again.
--
-- One row per keyed request (not per job), written in the same transaction as the request's
-- jobs, so the key exists exactly when the jobs do. `fingerprint` is a SHA-256 of the request
-- as the engine saw it: a key reused for a different request is refused instead of answered
-- with another request's ids. `job_ids` are in the request's order.
--
-- Mutable by nature (DESIGN §1.3): rows are inserted by enqueue and deleted in batches by the
-- leader's janitor after the retention; one row per request keeps its churn a fraction of
-- the job rate.
CREATE TABLE pgferry.idempotency_keys (
    key         text        NOT NULL PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    job_ids     bigint[]    NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idempotency_keys_created ON pgferry.idempotency_keys (created_at);
