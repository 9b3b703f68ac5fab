-- A row of `scheduled` says whether it is its job's first run (issue 22). An enqueue writes
-- true: that job has no row in the log yet, and everything a listing shows of it is in this
-- row (and its unique key), so list_scheduled.sql answers a page of such jobs itself and
-- the page skips jobs_detail.sql, whose per-job probes of every attached log partition were
-- over half of the database's time in `bench http-jobs` (docs/performance.md, "A page of
-- scheduled jobs from its own rows"). Retries and snoozes written by complete(), and every
-- row written before this migration, say false: they are read through jobs_detail.sql as
-- before, with their earlier attempts. A constant default: no rewrite of the table.
ALTER TABLE pgferry.scheduled ADD COLUMN first_run boolean NOT NULL DEFAULT false;
