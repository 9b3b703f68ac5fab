-- The step an instance last finished through wf_finish's set-based part, kept on its row
-- (ADR 0016, addendum "The update is the lock"). That part's one UPDATE reads, locks and
-- moves each instance; its history row needs the step that ran (name, attempt, start),
-- which the update overwrites, and RETURNING sees only the new row. The update
-- copies them here and returns them, where a read of every instance before the update
-- (and a FOR UPDATE, one WAL record per outcome) used to get them.
--
-- Working columns of wf_finish: nothing else writes or reads them, and the history is
-- wf_steps. Not indexed, so the step updates stay HOT; nullable without a default, so
-- adding them rewrites nothing.
ALTER TABLE pgferry.wf_instances
    ADD COLUMN prev_step text,
    ADD COLUMN prev_attempt int,
    ADD COLUMN prev_started_at timestamptz;
