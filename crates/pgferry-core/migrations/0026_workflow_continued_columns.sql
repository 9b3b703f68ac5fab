-- wf_finish answers a continued step in columns of their own (cont_kind, cont_step,
-- cont_state, cont_input, cont_attempt, cont_max_attempts, cont_step_seq, cont_parent_id;
-- cont_step_seq is NULL when the outcome did not continue) instead of one jsonb object
-- built per step: jsonb_build_object took the state and input apart and put them together
-- again, 5% of the cluster's CPU in the 3-step machine's phase of `bench workflow`
-- (docs/performance.md, "Continued steps in columns"). A function's result columns cannot
-- be changed by CREATE OR REPLACE, so the old definition is dropped here; the new one is
-- src/sql/functions/wf_finish.sql, applied after the migrations (ADR 0017). Callers that
-- select `id, applied` are unchanged.
DROP FUNCTION IF EXISTS pgferry.wf_finish(jsonb);
