-- The oldest sealed segment, if its retention has passed. Segments are freed strictly in
-- ring order so that a receipt never outlives the segments of the jobs it names. A segment
-- holds every queue's jobs, so it is kept for the longest retention any queue asks for (and
-- at least the leader's configured one).
-- $1 retention ms (leader setting)
SELECT segment,
       sealed_at < now() - greatest($1::bigint,
                                    (SELECT coalesce(max(q.retention_ms), 0)
                                       FROM pgferry.queues q)) * interval '1 millisecond'
           AS retention_passed
  FROM pgferry.segments
 WHERE state = 'sealed'
 ORDER BY sealed_at
 LIMIT 1
