-- Claim a batch of due steps of a queue: pgferry.wf_claim. $1 queue, $2 batch, $3 worker,
-- $4 lease in milliseconds.
SELECT id, kind, step, state, input, attempt, max_attempts, step_seq, wake, parent_id, inbox,
       children
  FROM pgferry.wf_claim($1::text, $2::int, $3::text, $4::int)
