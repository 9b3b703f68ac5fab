-- The key sweeper (workflow/sweeper.rs): the keys that have waiters, up to $2 of them in
-- key order after $1 ('' from the first), found by a loose scan of wf_key_waiters' primary
-- key: one probe per key with waiters, and one probe in all when nothing waits. Each key
-- with a free slot that no waiter took (for round_robin: and no live representative in
-- the picker, the condition of wf_free_slot) goes to wf_sweep_key, which locks it and
-- rechecks everything. No wf_instances row is read but a round_robin representative's, by
-- its primary key. Returns the keys walked, the last of them (where the next statement
-- goes on) and the waiters promoted.
WITH RECURSIVE waiting (key) AS (
    (SELECT kw.key FROM pgferry.wf_key_waiters kw
      WHERE kw.key > $1::text
      ORDER BY kw.key
      LIMIT 1)
    UNION ALL
    SELECT (SELECT kw.key FROM pgferry.wf_key_waiters kw
             WHERE kw.key > w.key
             ORDER BY kw.key
             LIMIT 1)
      FROM waiting w
     WHERE w.key IS NOT NULL
), walked AS (
    -- The limit ends the recursion: keys past it are never probed.
    SELECT w.key FROM waiting w WHERE w.key IS NOT NULL LIMIT $2::int
)
SELECT (SELECT count(*) FROM walked)::int AS walked,
       (SELECT max(w.key) FROM walked w) AS last,
       (SELECT coalesce(sum(pgferry.wf_sweep_key(k.key)), 0)::int
          FROM walked w
          JOIN pgferry.wf_keys k ON k.key = w.key
         WHERE k.running < k.max
           AND (k.strategy <> 'round_robin' OR k.rep IS NULL OR NOT EXISTS (
                  SELECT 1 FROM pgferry.wf_instances i
                   WHERE i.id = k.rep AND i.status = 'runnable' AND i.has_slot))) AS promoted
