-- The workflow invariants the database can show after a run (workflows.rs). Every
-- instance of the run's database is the suite's. A step outcome applied twice would be two
-- history rows of one claim; a step after a cancel would be a history row of a later claim
-- than the cancel's; a signal consumed twice, or a child joined twice, would leave a done
-- order with other than one consumed signal or three done children. Concurrency keys must
-- count exactly their slot holders and name no stale step in the picker.
SELECT
    (SELECT count(*) FROM pgferry.wf_instances WHERE active) AS active,
    (SELECT count(*) FROM pgferry.wf_instances WHERE status = 'done') AS done,
    (SELECT count(*) FROM pgferry.wf_instances WHERE status = 'failed') AS failed,
    (SELECT count(*) FROM pgferry.wf_instances WHERE status = 'cancelled') AS cancelled,
    (SELECT count(*) FROM (SELECT instance_id, step_seq FROM pgferry.wf_steps
                            WHERE outcome <> 'cancelled'
                            GROUP BY instance_id, step_seq HAVING count(*) > 1) d
    ) AS outcomes_twice,
    (SELECT count(*) FROM pgferry.wf_steps s
       JOIN pgferry.wf_steps c ON c.instance_id = s.instance_id AND c.outcome = 'cancelled'
      WHERE s.outcome <> 'cancelled' AND s.step_seq > c.step_seq
    ) AS steps_after_cancel,
    (SELECT count(*) FROM (SELECT instance_id FROM pgferry.wf_steps WHERE outcome = 'cancelled'
                            GROUP BY instance_id HAVING count(*) > 1) d
    ) AS cancelled_twice,
    (SELECT count(*) FROM pgferry.wf_instances i
      WHERE i.kind = 'chaos-order' AND i.status = 'done'
        AND (SELECT count(*) FROM pgferry.wf_signals s
              WHERE s.instance_id = i.id AND s.consumed_gen IS NOT NULL) <> 1
    ) AS done_without_one_signal,
    (SELECT count(*) FROM pgferry.wf_instances i
      WHERE i.kind = 'chaos-order' AND i.status = 'done'
        AND (SELECT count(*) FROM pgferry.wf_instances c
              WHERE c.parent_id = i.id AND c.status = 'done') <> 3
    ) AS done_without_three_children,
    -- Concurrency keys: a slot count other than the instances holding a slot, or a
    -- round_robin key's step in the picker that is not a runnable slot holder.
    (SELECT count(*) FROM pgferry.wf_keys k
      WHERE k.running <> (SELECT count(*) FROM pgferry.wf_instances i
                           WHERE i.concurrency_key = k.key AND i.has_slot)
         OR (k.rep IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pgferry.wf_instances i
                 WHERE i.id = k.rep AND i.status = 'runnable' AND i.has_slot))
    ) AS keys_unbalanced,
    (SELECT count(*) FROM pgferry.wf_key_waiters w
       JOIN pgferry.wf_instances i ON i.id = w.instance_id
      WHERE NOT i.active
    ) AS ended_waiting,
    (SELECT count(*) FROM pgferry.wf_steps WHERE outcome <> 'cancelled') AS steps_recorded
