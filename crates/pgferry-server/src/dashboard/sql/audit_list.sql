-- One tenant's audit log, newest first, keyset-paginated by audit_id (index audit_log_tenant).
-- $1 tenant_id, $2 below this audit_id (NULL: from the newest), $3 limit
SELECT audit_id, at, key_id, actor, action, target, detail
  FROM pgferry.audit_log
 WHERE tenant_id = $1
   AND ($2::bigint IS NULL OR audit_id < $2)
 ORDER BY audit_id DESC
 LIMIT $3
