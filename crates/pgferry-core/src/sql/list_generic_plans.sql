-- list_jobs runs its phase statements with generic plans and without bitmap scans, for the
-- call's transaction only (listing.rs says why). One statement: one round trip.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_bitmapscan', 'off', true)
