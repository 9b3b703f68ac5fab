-- list_jobs runs its phase statements with generic plans, for the call's transaction only
-- (listing.rs says why).
SET LOCAL plan_cache_mode = force_generic_plan
