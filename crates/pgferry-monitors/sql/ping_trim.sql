-- Keeps the newest $2 pings of a monitor.
DELETE FROM pgferry_mon.pings
WHERE monitor_id = $1
  AND id <= (SELECT id FROM pgferry_mon.pings WHERE monitor_id = $1
             ORDER BY id DESC OFFSET $2 LIMIT 1)
