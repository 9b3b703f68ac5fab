SELECT p.id, p.kind, p.at, p.body
FROM pgferry_mon.pings p JOIN pgferry_mon.monitors m ON m.id = p.monitor_id
WHERE m.tenant_id = $1 AND m.name = $2
ORDER BY p.id DESC
LIMIT $3
