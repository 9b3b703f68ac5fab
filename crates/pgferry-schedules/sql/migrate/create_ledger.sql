CREATE SCHEMA IF NOT EXISTS pgferry_sched;
CREATE TABLE IF NOT EXISTS pgferry_sched.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
