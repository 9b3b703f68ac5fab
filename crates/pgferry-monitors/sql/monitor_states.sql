SELECT state, count(*) AS n FROM pgferry_mon.monitors GROUP BY state
