-- Create a queue on first use (producers and workers both may be first). Cold path.
-- $1 queue name
INSERT INTO pgferry.queues (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
