-- Rows outside the log keep the job's times (issue 18): a dead-letter entry keeps when its
-- job was enqueued, a job cancelled while scheduled keeps when it was enqueued and when it
-- was due, so that neither the DLQ nor GET /v1/jobs/{id} loses them once the job's rows in
-- the log are gone. Small, rarely written tables: the added columns cost the hot path nothing.
ALTER TABLE pgferry.scheduled ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE pgferry.dead ADD COLUMN enqueued_at timestamptz;
ALTER TABLE pgferry.cancels ADD COLUMN enqueued_at timestamptz,
                            ADD COLUMN run_at timestamptz;
