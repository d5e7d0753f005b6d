-- mmh3 schema, version 4: the Oxen.ai integration (src/oxen/, docs/OXEN-INTEGRATION.md).
--
-- generations.oxen_status follows a render's mirroring to the hub:
--   NULL      not mirrored (Oxen not configured, or the render predates it)
--   starting  the render started; the pending record is not on the hub yet
--   pending   the pending record is on the hub (or, for a job claimed from
--             the hub's queue, the hub holds it as processing)
--   mirrored  the outcome (and the mp4) is committed; claimed jobs reported
--   failed    a hub call failed; oxen_message says which and why. The local
--             render and its result are never affected.
-- oxen_job_id is the hub's generation id of a job claimed from its queue
-- (unique: one local row per hub job).

ALTER TABLE generations
    ADD COLUMN oxen_status  text CHECK (oxen_status IN ('starting', 'pending', 'mirrored', 'failed')),
    ADD COLUMN oxen_message text,
    ADD COLUMN oxen_job_id  text UNIQUE;

-- The agent's work list: renders whose mirroring is not finished.
CREATE INDEX generations_oxen_open ON generations (id) WHERE oxen_status IN ('starting', 'pending');

-- The claim loop's journal: a hub job is written down (with the local id
-- that becomes its claim token) before the hub is asked, so a worker killed
-- at any point is succeeded by one that finishes the same claim.
CREATE TABLE oxen_claims (
    hub_generation_id text PRIMARY KEY,
    generation_id     uuid NOT NULL UNIQUE,
    state             text NOT NULL CHECK (state IN ('claiming', 'claimed', 'lost', 'refused')),
    job               jsonb NOT NULL,        -- the hub's row as listed
    message           text,                  -- why lost / refused
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX oxen_claims_open ON oxen_claims (created_at) WHERE state = 'claiming';

-- The generation object gains oxen_status, oxen_message and oxen_job_id.
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
        'seq', g.seq
    ) || jsonb_build_object(
        'oxen_status', g.oxen_status,
        'oxen_message', g.oxen_message,
        'oxen_job_id', g.oxen_job_id)
$$;
