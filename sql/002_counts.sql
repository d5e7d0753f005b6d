-- mmh3 schema, version 2: counts of generations per status, kept by
-- triggers, so history pages and /api/status need no count(*) over the whole
-- table; and a cheaper generation_json (the same shape).

CREATE TABLE generation_counts (
    status text PRIMARY KEY,
    n      bigint NOT NULL
);
INSERT INTO generation_counts (status, n)
SELECT s, (SELECT count(*) FROM generations g WHERE g.status = s)
  FROM unnest(ARRAY['queued', 'processing', 'succeeded', 'failed', 'cancelled']) AS s;

-- Inserts and deletes per statement (a bulk insert is one update of the counts).
CREATE FUNCTION generation_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE generation_counts c SET n = c.n + d.k
      FROM (SELECT status, count(*) AS k FROM new_rows GROUP BY status) d WHERE c.status = d.status;
    RETURN NULL;
END $$;

CREATE FUNCTION generation_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE generation_counts c SET n = c.n - d.k
      FROM (SELECT status, count(*) AS k FROM old_rows GROUP BY status) d WHERE c.status = d.status;
    RETURN NULL;
END $$;

-- Status changes per row (a few per job; progress updates do not fire it).
CREATE FUNCTION generation_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE generation_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE generation_counts SET n = n + 1 WHERE status = NEW.status;
    RETURN NULL;
END $$;

CREATE TRIGGER generation_counts_insert AFTER INSERT ON generations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION generation_counts_insert();
CREATE TRIGGER generation_counts_delete AFTER DELETE ON generations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION generation_counts_delete();
CREATE TRIGGER generation_counts_update AFTER UPDATE OF status ON generations
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION generation_counts_update();

-- Same object as version 1, about twice as fast: no reference lookups for
-- rows without references, timestamps inline.
CREATE OR REPLACE FUNCTION generation_json(g generations) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'generation_id', g.id,
        'status', g.status,
        'model_name', 'minimax-h3',
        'media_type', 'video',
        'prompt', g.prompt,
        'partition', g.partition,
        'image_ids', to_jsonb(g.image_ids),
        'last_image_id', g.last_image_id,
        'references', CASE WHEN cardinality(g.image_ids) = 0 THEN '[]'::jsonb
                           ELSE COALESCE((SELECT jsonb_agg(reference_json(u) ORDER BY r.ord)
                                            FROM unnest(g.image_ids) WITH ORDINALITY AS r(id, ord)
                                            JOIN uploads u ON u.id = r.id), '[]'::jsonb) END,
        'last_image', CASE WHEN g.last_image_id IS NOT NULL
                           THEN (SELECT reference_json(u) FROM uploads u WHERE u.id = g.last_image_id) END,
        'frames', g.frames,
        'seconds', round(g.frames / 24.0, 3),
        'width', g.width,
        'height', g.height,
        'steps', g.steps,
        'seed', g.seed,
        'seed_drawn', g.seed_drawn,
        'no_audio', g.no_audio,
        'fast', g.fast,
        'crf', g.crf,
        'preset', g.preset,
        'warnings', g.warnings
    ) || jsonb_build_object(
        'stage', g.stage,
        'step', g.step,
        'total_steps', g.total_steps,
        'progress', generation_progress(g),
        'timings', g.timings,
        'total_seconds', g.total_seconds,
        'result_url', '/api/files/' || g.result_path,
        'poster_url', '/api/files/' || g.poster_path,
        'rating', g.rating,
        'error_message', g.error_message,
        'attempts', g.attempts,
        'cancel_requested', g.cancel_requested,
        'enqueued_at', floor(extract(epoch FROM g.enqueued_at))::bigint,
        'started_at', floor(extract(epoch FROM g.started_at))::bigint,
        'completed_at', floor(extract(epoch FROM g.completed_at))::bigint,
        'updated_at', floor(extract(epoch FROM g.updated_at))::bigint,
        'worker_id', g.worker_id,
        'placement', g.placement,
        'seq', g.seq)
$$;

-- Queue counts from generation_counts.
CREATE OR REPLACE FUNCTION status_json(version text, lease_seconds double precision) RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH online AS (
        SELECT w.*, CASE w.state WHEN 'busy' THEN 0 WHEN 'idle' THEN 0 WHEN 'loading' THEN 1
                                 WHEN 'starting' THEN 2 ELSE 3 END AS rank
          FROM workers w
         WHERE w.state <> 'stopped' AND w.heartbeat_at > now() - make_interval(secs => lease_seconds)
    ), best AS (
        SELECT * FROM online ORDER BY rank, heartbeat_at DESC LIMIT 1
    )
    SELECT jsonb_build_object(
        'version', version,
        'time', unix_seconds(now()),
        'engine', COALESCE((SELECT jsonb_build_object(
                'kind', b.engine_kind,
                'state', CASE b.state WHEN 'idle' THEN 'ready' ELSE b.state END,
                'message', b.message,
                'resident', COALESCE((b.engine_status->>'resident')::boolean, false),
                'placement', b.engine_status->>'placement',
                'details', b.engine_status) FROM best b),
            jsonb_build_object('kind', NULL, 'state', 'offline',
                               'message', 'no worker is connected to the queue', 'resident', false,
                               'placement', NULL, 'details', '{}'::jsonb)),
        'workers', COALESCE((SELECT jsonb_agg(worker_json(w, lease_seconds) ORDER BY w.started_at DESC)
                               FROM workers w
                              WHERE w.heartbeat_at > now() - interval '1 day'), '[]'::jsonb),
        'queue', (SELECT jsonb_object_agg(status, n) FROM generation_counts))
$$;
