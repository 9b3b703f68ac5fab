-- A history row's finished_at is the moment its outcome was applied, under the instance's
-- lock, not the start of the statement that applied it (now()).
--
-- With now(), a cancel whose statement began before an outcome's, but which waited for a
-- lock (its instance's parent chain, taken root first) while that outcome committed, got
-- the earlier time: the history showed the cancel before the step it followed, and the
-- "no step after a cancel" check of workflow_races' ledger failed in CI. Every insert into
-- wf_steps happens while its instance's row is locked, so clock_timestamp() orders one
-- instance's rows as they were applied. Changing a default rewrites nothing.
ALTER TABLE pgferry.wf_steps ALTER COLUMN finished_at SET DEFAULT clock_timestamp();
