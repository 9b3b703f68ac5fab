-- A queue's ended instances go back to the default retention. $1 queue.
DELETE FROM pgferry.wf_queue_retention WHERE queue = $1::text
