CREATE SCHEMA IF NOT EXISTS pgferry_ash;
CREATE TABLE IF NOT EXISTS pgferry_ash.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
