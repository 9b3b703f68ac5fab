-- Purge dead jobs (they are gone for good). One statement, counters included.
-- $1 queue names (NULL: all), $2 kind, $3 error substring, $4 job ids (NULL: any)
WITH gone AS (
    DELETE FROM pgferry.dead d
     USING pgferry.lanes l, pgferry.queues q
     WHERE l.lane = d.lane AND q.queue_id = l.queue_id
       AND ($1::text[] IS NULL OR q.name = ANY ($1))
       AND ($2::text IS NULL OR d.kind = $2)
       AND ($3::text IS NULL OR strpos(d.error, $3) > 0)
       AND ($4::bigint[] IS NULL OR d.job_id = ANY ($4))
    RETURNING d.job_id, d.lane
),
counted AS (
    INSERT INTO pgferry.lane_counters AS c (lane, dead, version)
    SELECT g.lane, -count(*), 1 FROM gone g GROUP BY g.lane ORDER BY g.lane
    ON CONFLICT (lane) DO UPDATE
       SET dead = c.dead + EXCLUDED.dead, version = c.version + 1, updated_at = now()
)
SELECT count(*) AS purged FROM gone
