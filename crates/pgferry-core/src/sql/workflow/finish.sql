-- Apply a batch of step outcomes: pgferry.wf_finish. $1 the outcomes as a JSON array.
-- cont_*: the next step of a `next` that asked to continue, claimed here (cont_step_seq
-- NULL: it did not continue).
SELECT id, applied, cont_kind, cont_step, cont_state, cont_input, cont_attempt,
       cont_max_attempts, cont_step_seq, cont_parent_id
  FROM pgferry.wf_finish($1::jsonb)
