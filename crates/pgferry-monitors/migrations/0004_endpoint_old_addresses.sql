-- Rotating a webhook endpoint's address (docs/monitors.md): the endpoint gets a new
-- address, and the one it had may stay accepted for a grace period so a provider's
-- configuration can be switched without losing events. Each such old address is one row
-- here until it lapses; requests to it are stored against the same endpoint. A separate
-- table (rather than one "previous address" column) because a second rotation within the
-- grace of the first must not make the first's old address unreachable by overwriting it
-- - nor keep it past what the second rotation allows (it caps every old address's grace).
CREATE TABLE pgferry_mon.endpoint_old_addresses (
    address        text PRIMARY KEY,
    endpoint_id    bigint NOT NULL REFERENCES pgferry_mon.endpoints (id) ON DELETE CASCADE,
    accepted_until timestamptz NOT NULL
);
CREATE INDEX endpoint_old_addresses_endpoint ON pgferry_mon.endpoint_old_addresses (endpoint_id);
