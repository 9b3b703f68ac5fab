-- Whether some session holds the leader's session advisory lock (a bigint key is stored as
-- classid = high 32 bits, objid = low 32 bits, objsubid = 1).
SELECT count(*)::bigint AS holders
  FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 1
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((classid::bigint << 32) | objid::bigint) = $1::bigint
