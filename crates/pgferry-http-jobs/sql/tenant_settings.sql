-- Everything the worker needs of a tenant for one batch, in one round trip.
SELECT
    ARRAY(SELECT secret FROM pgferry_http.signing_secrets WHERE tenant_id = $1 ORDER BY id DESC) AS secrets,
    (SELECT ranges FROM pgferry_http.allow_lists WHERE tenant_id = $1) AS ranges,
    (SELECT cidrs FROM pgferry_http.allow_lists WHERE tenant_id = $1) AS cidrs,
    ARRAY(SELECT destination FROM pgferry_http.rate_limits WHERE tenant_id = $1 ORDER BY destination) AS rate_destinations,
    ARRAY(SELECT per_sec FROM pgferry_http.rate_limits WHERE tenant_id = $1 ORDER BY destination) AS rate_per_sec,
    ARRAY(SELECT burst FROM pgferry_http.rate_limits WHERE tenant_id = $1 ORDER BY destination) AS rate_burst
