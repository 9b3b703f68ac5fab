-- Starts a batch of plain instances (no correlation, concurrency or rate key) in one
-- statement, as wf_start starts each of them: the instance runnable, its first step in
-- the picker at its run_at (now if NULL). Aligned arrays, one element per instance:
-- $1 kinds, $2 queues, $3 first steps, $4 inputs, $5 states (NULL: {}), $6 priorities,
-- $7 run ats, $8 max attempts (NULL: 25). Returns the ids in the given order.
-- Ids are taken from the instances' sequence first, so each picker row names its
-- instance without reading the instances back (`given` is evaluated once: it is used
-- three times and calls nextval).
WITH given AS (
    SELECT nextval('pgferry.wf_instance_ids') AS id, u.*
      FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[],
                  $6::smallint[], $7::timestamptz[], $8::int[])
           WITH ORDINALITY AS u(kind, queue, step, input, state, priority, run_at,
                                max_attempts, n)
), instances AS (
    INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, state, input, priority,
                                      max_attempts)
    SELECT g.id, g.kind, g.queue, g.step, 'runnable', coalesce(g.state, '{}'),
           coalesce(g.input, '{}'), g.priority, coalesce(g.max_attempts, 25)
      FROM given g
     ORDER BY g.n
), picker AS (
    INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
    SELECT g.id, g.queue, g.priority, coalesce(g.run_at, now())
      FROM given g
)
SELECT g.id FROM given g ORDER BY g.n
