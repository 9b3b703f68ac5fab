-- The migration ledger of every component (engine, server, ash, …): versioned migrations
-- applied once each, and the checksum of each repeatable function file last applied.
CREATE SCHEMA IF NOT EXISTS pgferry;
CREATE TABLE IF NOT EXISTS pgferry.schema_migrations (
    component  text NOT NULL,
    version    int NOT NULL,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
);
CREATE TABLE IF NOT EXISTS pgferry.schema_functions (
    component  text NOT NULL,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, name)
);
