-- The generation object gains enqueued_us: the enqueue time in microseconds,
-- the key the lists are ordered by (with the id as tie-break). enqueued_at
-- stays whole seconds; a client that places live rows by it alone puts rows
-- enqueued within the same second in an order the server does not use.
-- One key is added to 004's object instead of restating all of it: callers
-- name generation_json at run time, so they get this one.
ALTER FUNCTION generation_json(generations) RENAME TO generation_json_004;
CREATE FUNCTION generation_json(g generations) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT generation_json_004(g) ||
           jsonb_build_object('enqueued_us', floor(extract(epoch FROM g.enqueued_at) * 1000000)::bigint)
$$;
