-- Rotation waits at most this long for readers to release the partition ($1, e.g. '50ms').
SELECT set_config('lock_timeout', $1::text, true)
