-- Per-queue counts: the sums of the queues' lane counters (queue name unique, lanes by
-- queue, lane_counters primary key). A queue with no counter row yet counts zeros.
-- $1 queue names
SELECT q.name,
       coalesce(sum(c.pending), 0)::bigint AS pending,
       coalesce(sum(c.running), 0)::bigint AS running,
       coalesce(sum(c.scheduled), 0)::bigint AS scheduled,
       coalesce(sum(c.dead), 0)::bigint AS dead,
       coalesce(sum(c.enqueued), 0)::bigint AS enqueued,
       coalesce(sum(c.completed), 0)::bigint AS completed,
       coalesce(sum(c.failed), 0)::bigint AS failed,
       coalesce(sum(c.cancelled), 0)::bigint AS cancelled,
       max(c.recounted_at) AS recounted_at
  FROM pgferry.queues q
  LEFT JOIN pgferry.lanes l ON l.queue_id = q.queue_id
  LEFT JOIN pgferry.lane_counters c ON c.lane = l.lane
 WHERE q.name = ANY ($1::text[])
 GROUP BY q.name
