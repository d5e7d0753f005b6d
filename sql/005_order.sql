-- The generation object gains enqueued_us: the enqueue time in microseconds,
-- the key the lists are ordered by (with the id as tie-break). enqueued_at
-- stays whole seconds; a client that places live rows by it alone puts rows
-- enqueued within the same second in an order the server does not use.
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
        'enqueued_us', floor(extract(epoch FROM g.enqueued_at) * 1000000)::bigint,
        'started_at', floor(extract(epoch FROM g.started_at))::bigint,
        'completed_at', floor(extract(epoch FROM g.completed_at))::bigint,
        'updated_at', floor(extract(epoch FROM g.updated_at))::bigint,
        'worker_id', g.worker_id,
        'placement', g.placement,
        'seq', g.seq
    ) || jsonb_build_object(
        'oxen_status', g.oxen_status,
        'oxen_message', g.oxen_message,
        'oxen_job_id', g.oxen_job_id)
$$;
