
-- Applies a batch of step outcomes given as one JSON array of objects (Outcome::to_wire:
-- {"id", "seq", "outcome", ...}); returns per outcome, in the given order, whether it was
-- applied or stale, and a continued step's columns (cont_*). The call for SQL and for
-- other languages. It takes the array apart into pgferry.wf_finish_arrays's aligned arrays,
-- where the whole of the work is done: a `next` asks to continue with "continue_lease_ms"
-- and to renew that lease with "renew_lease"; each element goes whole to wf_apply when it
-- is not plain, so an element is read as it always was.
CREATE OR REPLACE FUNCTION pgferry.wf_finish(p_outcomes jsonb)
RETURNS TABLE (id bigint, applied boolean, cont_kind text, cont_step text, cont_state jsonb,
               cont_input jsonb, cont_attempt int, cont_max_attempts int, cont_step_seq int,
               cont_parent_id bigint)
LANGUAGE sql AS $$
    SELECT f.id, f.applied, f.cont_kind, f.cont_step, f.cont_state, f.cont_input,
           f.cont_attempt, f.cont_max_attempts, f.cont_step_seq, f.cont_parent_id
      FROM (SELECT coalesce(array_agg((t.e->>'id')::bigint ORDER BY t.n), '{}') AS ids,
                   coalesce(array_agg((t.e->>'seq')::int ORDER BY t.n), '{}') AS seqs,
                   coalesce(array_agg(t.e->>'outcome' ORDER BY t.n), '{}') AS kinds,
                   coalesce(array_agg(t.e->>'step' ORDER BY t.n), '{}') AS steps,
                   coalesce(array_agg(t.e->'state' ORDER BY t.n), '{}') AS states,
                   coalesce(array_agg(t.e->'result' ORDER BY t.n), '{}') AS results,
                   coalesce(array_agg((t.e->>'continue_lease_ms')::float8 ORDER BY t.n), '{}')
                     AS leases,
                   coalesce(array_agg(coalesce((t.e->>'renew_lease')::boolean, false)
                                      ORDER BY t.n), '{}') AS renew,
                   coalesce(array_agg(t.e ORDER BY t.n), '{}') AS rest
              FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS t(e, n)) a
     CROSS JOIN LATERAL pgferry.wf_finish_arrays(a.ids, a.seqs, a.kinds, a.steps, a.states,
                                                 a.results, a.leases, a.renew, a.rest) f
$$;
