-- last_used_at, written at most once per interval per key ($2 seconds). $1 key_id.
UPDATE pgferry.api_keys SET last_used_at = now()
WHERE key_id = $1 AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $2))
