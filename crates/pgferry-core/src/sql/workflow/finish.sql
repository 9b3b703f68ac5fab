-- Apply a batch of step outcomes: pgferry.wf_finish. $1 the outcomes as a JSON array.
-- `continued`: the next step of a `next` that asked to continue, claimed here (or NULL).
SELECT id, applied, continued FROM pgferry.wf_finish($1::jsonb)
