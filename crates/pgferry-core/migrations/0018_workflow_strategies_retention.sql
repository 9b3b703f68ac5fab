-- Workflows, issue 19 follow-ups (docs/adr/0016-set-based-outcomes.md, docs/workflows.md).
--
-- 1. Concurrency strategies per key: what a start does when its key has no free slot.
--    'queue' (as before: its step waits among the key's waiters, oldest first),
--    'cancel_in_progress' (the oldest active instance holding a slot of the key is cancelled
--    and the new one runs), 'cancel_newest' (the new instance is cancelled at once).
ALTER TABLE pgferry.wf_keys ADD COLUMN strategy text NOT NULL DEFAULT 'queue'
    CHECK (strategy IN ('queue', 'cancel_in_progress', 'cancel_newest'));
-- The active instances of a key, oldest first (cancel_in_progress picks the oldest slot
-- holder). concurrency_key never changes and `active` flips once, at the terminal
-- transition, which is never a HOT update anyway: the index costs step updates nothing.
CREATE INDEX wf_instances_key ON pgferry.wf_instances (concurrency_key, id)
    WHERE concurrency_key IS NOT NULL AND active;

-- 2. Retention per queue: ended instances of a queue listed here are removed after its
--    retention instead of LeaderConfig::workflow_retention.
CREATE TABLE pgferry.wf_queue_retention (
    queue     text PRIMARY KEY,
    retention interval NOT NULL CHECK (retention >= interval '0')
);
-- Ended instances by queue and age: the retention duty walks each queue's oldest (prune.sql).
-- Replaces the index by age alone; rows enter it once, at the terminal transition.
DROP INDEX pgferry.wf_instances_finished;
CREATE INDEX wf_instances_finished ON pgferry.wf_instances (queue, finished_at) WHERE NOT active;

-- wf_start takes the strategy (a new last parameter with a default: callers of the old
-- twelve parameters, such as tenant_wf_start, are unchanged). A fresh database has none yet
-- (functions are applied after the migrations). Its new definition is
-- src/sql/functions/wf_start.sql, applied after this migration (ADR 0017).
DROP FUNCTION IF EXISTS pgferry.wf_start(text, text, text, jsonb, jsonb, text, text, int, text, smallint,
                               timestamptz, int);
