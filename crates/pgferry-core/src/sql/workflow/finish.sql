-- Apply a batch of step outcomes: pgferry.wf_finish. $1 the outcomes as a JSON array.
SELECT id, applied FROM pgferry.wf_finish($1::jsonb)
