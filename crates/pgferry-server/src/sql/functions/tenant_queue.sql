-- tenant_queue(tenant, queue): the engine's name of a tenant's queue (`t<id>.<queue>`, ADR
-- 0003), for SQL that enqueues or starts workflows in the application's own transaction:
--   SELECT pgferry.enqueue(pgferry.tenant_queue('acme', 'mail'), 'send', '{"to": "a@b"}');
-- The same rules as the API: the tenant must exist, the queue name is 1 to 48 characters of
-- a-z, 0-9, '_', '-', '.' starting with a letter or digit. Errors are SQLSTATE 22023 naming
-- the field (an unknown tenant: P0002, no_data_found).
CREATE OR REPLACE FUNCTION pgferry.tenant_queue(p_tenant text, p_queue text)
RETURNS text
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    v_id bigint;
BEGIN
    IF p_queue IS NULL OR length(p_queue) NOT BETWEEN 1 AND 48
       OR p_queue !~ '^[a-z0-9][a-z0-9_.-]*$' THEN
        RAISE EXCEPTION 'queue: % must be 1 to 48 characters of a-z, 0-9, ''_'', ''-'', ''.'', starting with a letter or digit', coalesce(quote_literal(left(p_queue, 80)), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT t.tenant_id INTO v_id FROM pgferry.tenants t WHERE t.name = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenant: % not found', coalesce(quote_literal(left(p_tenant, 80)), 'NULL')
            USING ERRCODE = 'P0002';
    END IF;
    RETURN 't' || v_id || '.' || p_queue;
END
$fn$;
