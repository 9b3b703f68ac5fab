-- $1 tenant_id, $2 key_id, $3 actor, $4 action, $5 target, $6 detail
INSERT INTO pgferry.audit_log (tenant_id, key_id, actor, action, target, detail)
VALUES ($1, $2, $3, $4, $5, $6)
