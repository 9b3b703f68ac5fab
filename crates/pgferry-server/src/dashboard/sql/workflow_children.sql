-- The children of a workflow instance, oldest first (index wf_instances_parent; a
-- parent's children are bounded by what its spawns started). $1 parent id, $2 page size
-- + 1 (the extra row only says whether there is more).
SELECT c.id, c.kind, c.queue, c.step, c.status, c.attempt, c.error,
       c.created_at, c.finished_at
  FROM pgferry.wf_instances c
 WHERE c.parent_id = $1::bigint
 ORDER BY c.id
 LIMIT $2::int
