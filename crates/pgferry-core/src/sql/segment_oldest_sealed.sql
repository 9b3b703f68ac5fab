-- The oldest sealed segment, if its retention has passed. Segments are freed strictly in
-- ring order so that a receipt never outlives the segments of the jobs it names.
-- $1 retention ms
SELECT segment, sealed_at < now() - $1::bigint * interval '1 millisecond' AS retention_passed
  FROM pgferry.segments
 WHERE state = 'sealed'
 ORDER BY sealed_at
 LIMIT 1
