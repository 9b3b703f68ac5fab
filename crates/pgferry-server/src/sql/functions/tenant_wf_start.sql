-- tenant_wf_start(tenant, kind, queue, input, ...): starts a tenant's workflow instance in the
-- application's own transaction (it exists, and its first step becomes claimable, only if
-- that transaction commits), as POST /v1/workflows would: the queue and the concurrency and
-- rate keys get the tenant's prefix (ADR 0003), and every field is checked as the API checks
-- it (Start::validate) — each error SQLSTATE 22023 naming the field, an unknown tenant P0002.
-- An active instance with the same correlation key in the queue is returned instead
-- (duplicate = true), as pgferry.wf_start decides.
CREATE OR REPLACE FUNCTION pgferry.tenant_wf_start(
    p_tenant text, p_kind text, p_queue text, p_input jsonb DEFAULT '{}',
    p_correlation_key text DEFAULT NULL, p_concurrency_key text DEFAULT NULL,
    p_concurrency_limit int DEFAULT NULL, p_rate_key text DEFAULT NULL,
    p_priority int DEFAULT 0, p_run_at timestamptz DEFAULT NULL, p_max_attempts int DEFAULT NULL,
    OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_queue  text := pgferry.tenant_queue(p_tenant, p_queue);
    v_prefix text := split_part(v_queue, '.', 1) || '.';
    s        record;
BEGIN
    IF p_kind IS NULL OR length(p_kind) NOT BETWEEN 1 AND 128
       OR p_kind !~ '^[A-Za-z0-9_.:-]+$' THEN
        RAISE EXCEPTION 'kind: % must be 1 to 128 characters of A-Z, a-z, 0-9, ''_'', ''-'', ''.'', '':''', coalesce(quote_literal(left(p_kind, 80)), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_input IS NULL OR octet_length(p_input::text) > 1048576 THEN
        RAISE EXCEPTION 'input: must be JSON of at most 1048576 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_correlation_key IS NOT NULL AND length(p_correlation_key) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'correlation_key: must be 1 to 256 characters' USING ERRCODE = '22023';
    END IF;
    IF p_concurrency_key IS NOT NULL AND length(p_concurrency_key) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'concurrency_key: must be 1 to 256 characters' USING ERRCODE = '22023';
    END IF;
    IF p_rate_key IS NOT NULL AND length(p_rate_key) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'rate_key: must be 1 to 256 characters' USING ERRCODE = '22023';
    END IF;
    IF p_concurrency_limit IS NOT NULL AND p_concurrency_limit < 1 THEN
        RAISE EXCEPTION 'concurrency_limit: % is not at least 1', p_concurrency_limit
            USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NULL OR p_priority NOT BETWEEN 0 AND 9 THEN
        RAISE EXCEPTION 'priority: % is not in 0..=9', p_priority USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts: % is not in 1..=1000', p_max_attempts
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO s FROM pgferry.wf_start(
        p_kind, v_queue, 'start', p_input, NULL, p_correlation_key,
        v_prefix || p_concurrency_key, p_concurrency_limit, v_prefix || p_rate_key,
        p_priority::smallint, p_run_at, p_max_attempts);
    id := s.id;
    duplicate := s.duplicate;
END
$fn$;
