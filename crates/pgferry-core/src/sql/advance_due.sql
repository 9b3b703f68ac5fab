-- Is the current segment due to be sealed, and is the next one in the ring free to open?
-- Returns the next segment (whose partitions the rotator attaches before advance_segment.sql,
-- in the same transaction). Same conditions as advance_segment.sql.
-- $1 segment duration ms
SELECT s.segment
  FROM pgferry.segments c, pgferry.segments s
 WHERE c.state = 'current' AND c.opened_at < now() - $1::bigint * interval '1 millisecond'
   AND s.segment = (c.segment + 1) % 16 AND s.state = 'free'
