-- Is a partition attached to its parent, and is a concurrent detach pending?
-- $1 partition name (internal). No row: detached.
SELECT i.inhdetachpending
  FROM pg_inherits i
 WHERE i.inhrelid = $1::text::regclass
