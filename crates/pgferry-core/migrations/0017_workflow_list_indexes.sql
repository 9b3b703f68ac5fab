-- The workflow list's two filters that matched rarely (issue 24, docs/performance.md
-- "Workflow pages at 1M instances"): a terminal status (failed, cancelled, done) and a
-- correlation key. Both scanned the queue's whole history newest first through
-- wf_instances_queue; these give each its own keyset index.
--
-- wf_instances' step updates must stay HOT (0015): an update is HOT only if no column any
-- index looks at (key or predicate) changes, and `status` changes on every step, so no index
-- may name `status`. ended_status is a stored generated column that is NULL while the
-- instance is active and the status once it has ended: it changes only in the updates that
-- already flip `active` (the terminal transition, a retry), which are never HOT anyway.
-- Step updates compute it (a CASE, no I/O) and leave it NULL, so they stay HOT.
--
-- Write cost, per instance: one entry in wf_instances_ended at its terminal transition (an
-- update that already writes every index); one entry in wf_instances_correlation_all at
-- start when it has a correlation key, and again at each non-HOT update of it. Adding a
-- stored column rewrites the table once, at this migration (ACCESS EXCLUSIVE while it runs).
ALTER TABLE pgferry.wf_instances
    ADD COLUMN ended_status text GENERATED ALWAYS AS (CASE WHEN active THEN NULL ELSE status END) STORED;

-- status IN (done, failed, cancelled), newest first (list_ended.sql).
CREATE INDEX wf_instances_ended ON pgferry.wf_instances (queue, ended_status, id)
    WHERE ended_status IS NOT NULL;

-- Every instance of a correlation key, ended or not, newest first (list_correlated.sql).
-- wf_instances_correlation stays: it is the uniqueness of the active one, and partial.
CREATE INDEX wf_instances_correlation_all ON pgferry.wf_instances (queue, correlation_key, id)
    WHERE correlation_key IS NOT NULL;
