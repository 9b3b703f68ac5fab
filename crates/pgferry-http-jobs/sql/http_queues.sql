-- Queues whose jobs the server's HTTP worker runs: every tenant's queue named "http"
-- (engine name t<tenant>.http) and an untenanted "http".
SELECT name FROM pgferry.queues WHERE name = 'http' OR name LIKE 't%.http' ORDER BY name
