INSERT INTO pgferry_mon.schedule_health (schedule_id) VALUES ($1) ON CONFLICT DO NOTHING
