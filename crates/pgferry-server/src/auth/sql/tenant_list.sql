-- Tenants with their count of active (unrevoked) keys.
SELECT t.tenant_id, t.name, t.created_at,
       (SELECT count(*) FROM pgferry.api_keys k
        WHERE k.tenant_id = t.tenant_id AND k.revoked_at IS NULL) AS active_keys
FROM pgferry.tenants t
ORDER BY t.tenant_id
