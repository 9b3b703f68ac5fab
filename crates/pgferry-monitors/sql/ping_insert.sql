INSERT INTO pgferry_mon.pings (monitor_id, kind, at, body) VALUES ($1, $2, $3, $4)
