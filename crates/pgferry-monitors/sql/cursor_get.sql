-- Locked: two watchers (a leader change) read the fires one after the other.
SELECT recorded_at, schedule_id, fire_at FROM pgferry_mon.fire_cursor FOR UPDATE
