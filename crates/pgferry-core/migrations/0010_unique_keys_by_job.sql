-- A unique key held by a job that finished after its hand-over (ADR 0008) must outlive the
-- job's log rows for the key's period: the janitor keeps such a job's long_leases row while a
-- key with an unexpired period names it (long_leases_prune.sql), probing keys by job id.
-- Only unique enqueues write this index; the hot path never touches unique_keys.
CREATE INDEX unique_keys_job ON pgferry.unique_keys (job_id);
