-- Retry dead jobs: back into the log with the next attempt number and a fresh set of
-- attempts; the id and the history of earlier attempts stay. One statement, counters
-- included.
-- $1 queue names (NULL: all), $2 kind, $3 error substring, $4 job ids (NULL: any), $5 limit
WITH picked AS (
    DELETE FROM pgferry.dead d
     WHERE d.job_id IN (
         SELECT d2.job_id
           FROM pgferry.dead d2
           JOIN pgferry.lanes l ON l.lane = d2.lane
           JOIN pgferry.queues q ON q.queue_id = l.queue_id
          WHERE ($1::text[] IS NULL OR q.name = ANY ($1))
            AND ($2::text IS NULL OR d2.kind = $2)
            AND ($3::text IS NULL OR strpos(d2.error, $3) > 0)
            AND ($4::bigint[] IS NULL OR d2.job_id = ANY ($4))
          ORDER BY d2.died_at
          LIMIT $5
            FOR UPDATE SKIP LOCKED)
    RETURNING d.job_id, d.lane, d.attempt, d.max_attempts, d.kind, d.args, d.meta
),
again AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           p.lane, p.job_id, p.attempt + 1, p.attempt + p.max_attempts, p.kind, p.args, p.meta
      FROM picked p
),
-- Counted in this statement (lanes in order, like every counter write).
counted AS (
    INSERT INTO pgferry.lane_counters AS c (lane, pending, dead, version)
    SELECT p.lane, count(*), -count(*), 1 FROM picked p GROUP BY p.lane ORDER BY p.lane
    ON CONFLICT (lane) DO UPDATE
       SET pending = c.pending + EXCLUDED.pending, dead = c.dead + EXCLUDED.dead,
           version = c.version + 1, updated_at = now()
)
SELECT count(*) AS retried FROM picked
