-- advance: seal the current segment and make the next one in the ring current, when the
-- current one is older than $1 ms and the next one is free. Otherwise nothing changes (a
-- full ring keeps writing into the current segment rather than blocking producers).
-- NOTIFY pgferry_segment (delivered at commit) tells every process where COPYs now go
-- (listen.rs, ids.rs).
WITH cur AS (
    SELECT segment FROM pgferry.segments
     WHERE state = 'current' AND opened_at < now() - $1::bigint * interval '1 millisecond'
),
nxt AS (
    SELECT s.segment FROM pgferry.segments s, cur
     WHERE s.segment = (cur.segment + 1) % 16 AND s.state = 'free'
),
upd AS (
    UPDATE pgferry.segments s
       SET state = CASE WHEN s.segment = nxt.segment THEN 'current' ELSE 'sealed' END,
           opened_at = CASE WHEN s.segment = nxt.segment THEN now() ELSE s.opened_at END,
           sealed_at = CASE WHEN s.segment = nxt.segment THEN NULL ELSE now() END
      FROM cur, nxt
     WHERE s.segment IN (cur.segment, nxt.segment)
    RETURNING s.segment, s.state
)
SELECT u.segment, u.state,
       CASE WHEN u.state = 'current' THEN pg_notify('pgferry_segment', u.segment::text) END
  FROM upd u
