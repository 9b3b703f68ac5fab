-- Bulk operations started from the dashboard ("retry / cancel everything matching this
-- filter"): one row per operation, so it survives the page closing and the server
-- restarting. A server runs an operation while it holds its lease; a lease that ran out
-- (its server died) is taken over by another, which goes on from the filter: the engine's
-- filtered operations act only on jobs still matching, so a batch done twice does nothing.
CREATE TABLE pgferry.dashboard_ops (
    op_id        bigserial PRIMARY KEY,
    tenant_id    bigint NOT NULL,
    key_id       bigint NOT NULL,
    -- dead.retry | jobs.cancel
    action       text NOT NULL,
    -- The filter in the user's terms (queue as the tenant names it).
    filter       jsonb NOT NULL,
    -- running | done | failed | cancelled
    status       text NOT NULL DEFAULT 'running',
    done         bigint NOT NULL DEFAULT 0,
    batches      integer NOT NULL DEFAULT 0,
    error        text,
    owner        text,
    lease_until  timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
-- A tenant's operations, newest first.
CREATE INDEX dashboard_ops_tenant ON pgferry.dashboard_ops (tenant_id, op_id);
-- Operations to run or take over.
CREATE INDEX dashboard_ops_running ON pgferry.dashboard_ops (lease_until) WHERE status = 'running';
