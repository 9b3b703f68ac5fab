-- The lease of a queue's claims, for the leases a dispatcher reports and extends.
-- $1 engine queue name
SELECT lease_ms FROM pgferry.queues WHERE name = $1
