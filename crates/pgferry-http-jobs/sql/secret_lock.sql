-- Serialises changes to one tenant's secrets (rotation counts, then deletes and adds).
SELECT pg_advisory_xact_lock(hashtextextended('pgferry_http.secrets', $1))
