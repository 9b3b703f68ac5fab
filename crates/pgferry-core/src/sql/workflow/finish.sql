-- Apply a batch of step outcomes: pgferry.wf_finish_arrays. $1..$9 aligned arrays, one
-- element per outcome: ids, seqs, kinds, steps, states, results, continue leases (ms),
-- renew flags, and the JSON object of every kind but next and done.
-- cont_*: the next step of a `next` that asked to continue, claimed here (cont_step_seq
-- NULL: it did not continue).
SELECT id, applied, cont_kind, cont_step, cont_state, cont_input, cont_attempt,
       cont_max_attempts, cont_step_seq, cont_parent_id
  FROM pgferry.wf_finish_arrays($1::bigint[], $2::int[], $3::text[], $4::text[], $5::jsonb[],
                                $6::jsonb[], $7::float8[], $8::boolean[], $9::jsonb[])
