-- mmh3 schema, version 6: the request's few-step fields, and generation_json
-- defined once.
--
-- loras ([{name, strength}]), sampler (null for the default schedule, a
-- preset name, or a list of sigmas), sparse ('off' or a preset name) and
-- cache ('off', 'fbc[:T]', 'teacache[:T]') are settled with the rest of the
-- request (src/request/) and stored with it.
--
-- generation_json was defined in 001 and redefined in 002 (same object,
-- faster), 004 (+ oxen_status, oxen_message, oxen_job_id) and 005 (+
-- enqueued_us, on top of 004's, renamed generation_json_004). This is the
-- whole definition, replacing that chain; a later change restates it in a new
-- migration. Idempotent: applying it again changes nothing, and a database
-- migrated through 001..005 before it ends up as a fresh one.

ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS loras   jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN IF NOT EXISTS sampler jsonb,
    ADD COLUMN IF NOT EXISTS sparse  text NOT NULL DEFAULT 'off',
    ADD COLUMN IF NOT EXISTS cache   text NOT NULL DEFAULT 'off';

CREATE OR REPLACE FUNCTION generation_json(g generations) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        -- the request
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
        'loras', g.loras,
        'sampler', g.sampler,
        'sparse', g.sparse,
        'cache', g.cache,
        'warnings', g.warnings
    ) || jsonb_build_object(
        -- progress and outcome
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
        -- the key lists are ordered by (with the id): enqueued_at in microseconds
        'enqueued_us', floor(extract(epoch FROM g.enqueued_at) * 1000000)::bigint,
        'started_at', floor(extract(epoch FROM g.started_at))::bigint,
        'completed_at', floor(extract(epoch FROM g.completed_at))::bigint,
        'updated_at', floor(extract(epoch FROM g.updated_at))::bigint,
        'worker_id', g.worker_id,
        'placement', g.placement,
        'seq', g.seq
    ) || jsonb_build_object(
        -- Oxen.ai mirroring (sql/004_oxen.sql)
        'oxen_status', g.oxen_status,
        'oxen_message', g.oxen_message,
        'oxen_job_id', g.oxen_job_id)
$$;

DROP FUNCTION IF EXISTS generation_json_004(generations);
