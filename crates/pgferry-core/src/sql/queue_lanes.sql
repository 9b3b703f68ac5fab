-- Every lane of a queue (any priority). $1 queue name
SELECT l.lane FROM pgferry.lanes l JOIN pgferry.queues q USING (queue_id) WHERE q.name = $1
