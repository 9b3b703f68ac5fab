-- The segment after the current one in the ring, if it is free: the rotator keeps it attached
-- ahead of its opening (ADR 0009).
SELECT s.segment
  FROM pgferry.segments c, pgferry.segments s
 WHERE c.state = 'current' AND s.segment = (c.segment + 1) % 16 AND s.state = 'free'
