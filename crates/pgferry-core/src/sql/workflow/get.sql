-- One instance with what an operator needs to see, history included, in one statement.
-- $1 id.
SELECT i.id, i.kind, i.queue, i.step, i.status, i.state, i.input, i.result, i.error,
       i.attempt, i.max_attempts, i.priority, i.awaits, i.await_deadline, i.parent_id,
       i.children_pending, i.correlation_key, i.concurrency_key, i.rate_key, i.worker,
       i.created_at, i.updated_at, i.finished_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                            'step_seq', s.step_seq, 'step', s.step, 'attempt', s.attempt,
                            'outcome', s.outcome, 'error', s.error, 'worker', s.worker,
                            'started_at', s.started_at, 'finished_at', s.finished_at)
                        ORDER BY s.step_seq, s.finished_at)
                   FROM pgferry.wf_steps s WHERE s.instance_id = i.id), '[]') AS history,
       (SELECT count(*) FROM pgferry.wf_signals g
         WHERE g.instance_id = i.id AND g.consumed_gen IS NULL) AS inbox_pending
  FROM pgferry.wf_instances i
 WHERE i.id = $1::bigint
