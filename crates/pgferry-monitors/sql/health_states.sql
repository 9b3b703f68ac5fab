SELECT state, count(*) AS n FROM pgferry_mon.schedule_health GROUP BY state
