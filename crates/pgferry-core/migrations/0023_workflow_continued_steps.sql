-- wf_finish answers a third column, `continued`: the next step of a plain `next` that asked
-- to continue, claimed by the same statement for the same worker (ADR 0016, addendum
-- "Continued steps"). A function's result columns cannot be changed by CREATE OR REPLACE,
-- so the old definition is dropped here; the new one is src/sql/functions/wf_finish.sql,
-- applied after the migrations (ADR 0017). Callers that select `id, applied` are unchanged.
DROP FUNCTION IF EXISTS pgferry.wf_finish(jsonb);
