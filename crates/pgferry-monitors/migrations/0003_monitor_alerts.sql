-- Per-monitor alert routing and repeated alerts while an outage lasts (docs/monitors.md).
-- targets: names of the tenant's notification targets this monitor's alerts go to (NULL:
-- every target of the tenant whose filter matches).
ALTER TABLE pgferry_mon.monitors ADD COLUMN targets text[];
-- The interval of repeated alerts while late or down (NULL: one alert per outage).
ALTER TABLE pgferry_mon.monitors ADD COLUMN realert_ms bigint;
-- When the next repeat is due; set with an alert, cleared when the monitor leaves late/down.
ALTER TABLE pgferry_mon.monitors ADD COLUMN realert_at timestamptz;
-- The duty's scan for repeats: only monitors in an outage with repeats on have a value.
CREATE INDEX monitors_realert ON pgferry_mon.monitors (realert_at) WHERE realert_at IS NOT NULL;
