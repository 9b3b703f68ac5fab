
-- Locks an instance and its ancestors, root first. Every statement that ends an instance
-- with a parent (its join touches the parent) or cancels a tree takes its locks top-down,
-- so a child's outcome and its parent's cancel cannot deadlock.
CREATE OR REPLACE FUNCTION pgferry.wf_lock_chain(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
       FROM (WITH RECURSIVE up (id, depth) AS (
                 SELECT p_id, 0
                 UNION ALL
                 SELECT i.parent_id, up.depth + 1
                   FROM up JOIN pgferry.wf_instances i ON i.id = up.id
                  WHERE i.parent_id IS NOT NULL AND up.depth < 64)
             SELECT id, depth FROM up) a
       JOIN pgferry.wf_instances i ON i.id = a.id
      ORDER BY a.depth DESC
        FOR UPDATE OF i;
END $$;
