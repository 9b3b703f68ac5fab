-- Is any transaction still holding a write lock on a segment's ready partition? Such a
-- writer (a long transactional enqueue) may commit rows we have not checked yet.
-- $1 partition name (internal, from the segment number)
SELECT EXISTS (SELECT 1 FROM pg_locks
                WHERE relation = $1::text::regclass AND mode = 'RowExclusiveLock') AS writing
