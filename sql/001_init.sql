-- mmh3 schema, version 1: the generation queue, uploaded references, workers,
-- settings, and the change events behind the SSE stream.
--
-- Every change to a generation row gets a new `seq` from event_seq (BEFORE
-- trigger) and is announced with pg_notify('mmh3_events', ...) in the same
-- transaction (AFTER trigger), so API writes, worker writes and hand edits in
-- psql all reach the SSE clients. Payloads carry ids, never rows (NOTIFY
-- payloads must stay under 8000 bytes). Deletions leave a tombstone so a
-- client that reconnects with Last-Event-ID learns about them too.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE SEQUENCE event_seq;

CREATE TABLE uploads (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kind             text NOT NULL CHECK (kind IN ('image', 'video', 'audio')),
    path             text NOT NULL,      -- relative to the outputs folder, e.g. uploads/<id>.png
    poster_path      text,               -- videos: uploads/<id>.poster.jpg
    content_type     text NOT NULL,
    original_name    text,               -- shown to people only; never part of a path
    bytes            bigint NOT NULL,
    width            int,
    height           int,
    duration_seconds double precision,
    has_audio        boolean NOT NULL DEFAULT false,
    format_name      text,
    codec_name       text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE generations (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'processing', 'succeeded', 'failed', 'cancelled')),
    -- the request, as validated
    prompt              text NOT NULL,
    partition           text NOT NULL DEFAULT 'fl2va' CHECK (partition IN ('fl2va', 'ref2va')),
    image_ids           uuid[] NOT NULL DEFAULT '{}',
    last_image_id       uuid,
    frames              int NOT NULL,
    width               int NOT NULL,
    height              int NOT NULL,
    steps               int NOT NULL,
    seed                bigint NOT NULL,
    seed_drawn          boolean NOT NULL DEFAULT false,
    no_audio            boolean NOT NULL DEFAULT false,
    fast                boolean NOT NULL DEFAULT false,
    crf                 int NOT NULL DEFAULT 18,
    preset              text NOT NULL DEFAULT 'medium',
    warnings            jsonb NOT NULL DEFAULT '[]',
    -- progress and outcome
    stage               text NOT NULL DEFAULT 'queued',
    step                int NOT NULL DEFAULT 0,
    total_steps         int NOT NULL DEFAULT 0,
    timings             jsonb NOT NULL DEFAULT '{}',   -- seconds per stage name
    total_seconds       double precision,
    peak_device_bytes   bigint,
    placement           text,
    result_path         text,                          -- relative to the outputs folder
    poster_path         text,
    rating              text CHECK (rating IN ('approved', 'rejected')),
    error_message       text,
    -- the claim: attempts counts renders started; the claiming worker and its
    -- database session identify a crashed claim (see the queue code)
    attempts            int NOT NULL DEFAULT 0,
    cancel_requested    boolean NOT NULL DEFAULT false,
    worker_id           text,
    claim_pid           int,
    claim_backend_start timestamptz,
    enqueued_at         timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    seq                 bigint NOT NULL DEFAULT nextval('event_seq')
);

-- History pages (newest first), with and without a status filter.
CREATE INDEX generations_history ON generations (enqueued_at DESC, id DESC);
CREATE INDEX generations_status_history ON generations (status, enqueued_at DESC, id DESC);
CREATE INDEX generations_rating_history ON generations (rating, enqueued_at DESC, id DESC) WHERE rating IS NOT NULL;
-- Prompt search (ILIKE '%text%').
CREATE INDEX generations_prompt_trgm ON generations USING gin (prompt gin_trgm_ops);
-- The claim: oldest queued first.
CREATE INDEX generations_queued ON generations (enqueued_at, id) WHERE status = 'queued';
-- Crash recovery scans the rows in flight.
CREATE INDEX generations_processing ON generations (worker_id) WHERE status = 'processing';
-- Last-Event-ID catch-up.
CREATE INDEX generations_seq ON generations (seq);

CREATE TABLE generation_tombstones (
    seq           bigint PRIMARY KEY,
    generation_id uuid NOT NULL,
    deleted_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX generation_tombstones_age ON generation_tombstones (deleted_at);

CREATE TABLE workers (
    id                    text PRIMARY KEY,   -- host:pid:random
    hostname              text NOT NULL,
    pid                   int NOT NULL,
    engine_kind           text,
    state                 text NOT NULL DEFAULT 'starting'
                          CHECK (state IN ('starting', 'loading', 'idle', 'busy', 'failed', 'stopped')),
    message               text,
    engine_status         jsonb NOT NULL DEFAULT '{}',
    current_generation_id uuid,
    started_at            timestamptz NOT NULL DEFAULT now(),
    heartbeat_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The oldest seq a Last-Event-ID catch-up can still serve (older tombstones are pruned).
CREATE TABLE event_horizon (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    min_seq bigint NOT NULL
);
INSERT INTO event_horizon VALUES (true, 0);

---------------------------------------------------------------- events

CREATE FUNCTION generations_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.seq := nextval('event_seq');
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE TRIGGER generations_stamp BEFORE UPDATE ON generations
    FOR EACH ROW EXECUTE FUNCTION generations_stamp();

CREATE FUNCTION generations_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        s := nextval('event_seq');
        INSERT INTO generation_tombstones (seq, generation_id) VALUES (s, OLD.id);
        PERFORM pg_notify('mmh3_events',
            json_build_object('kind', 'deleted', 'seq', s, 'generation_id', OLD.id)::text);
        RETURN OLD;
    END IF;
    PERFORM pg_notify('mmh3_events',
        json_build_object('kind', 'update', 'seq', NEW.seq, 'generation_id', NEW.id, 'status', NEW.status,
                          'cancel_requested', NEW.cancel_requested)::text);
    RETURN NEW;
END $$;

CREATE TRIGGER generations_notify AFTER INSERT OR UPDATE OR DELETE ON generations
    FOR EACH ROW EXECUTE FUNCTION generations_notify();

-- Workers announce engine state changes (not their heartbeats).
CREATE FUNCTION workers_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mmh3_events',
        json_build_object('kind', 'worker', 'worker_id', COALESCE(NEW.id, OLD.id))::text);
    RETURN NULL;
END $$;

CREATE TRIGGER workers_notify_insert AFTER INSERT OR DELETE ON workers
    FOR EACH ROW EXECUTE FUNCTION workers_notify();
CREATE TRIGGER workers_notify_update AFTER UPDATE ON workers
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.message IS DISTINCT FROM NEW.message
                       OR OLD.engine_kind IS DISTINCT FROM NEW.engine_kind
                       OR OLD.engine_status IS DISTINCT FROM NEW.engine_status)
    EXECUTE FUNCTION workers_notify();

---------------------------------------------------------------- API views
-- The JSON shapes of docs/API.md are built here, once, for the API, the SSE
-- relay and the catch-up alike.

CREATE FUNCTION unix_seconds(t timestamptz) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT floor(extract(epoch FROM t))::bigint
$$;

CREATE FUNCTION upload_json(u uploads) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'image_id', u.id,
        'kind', u.kind,
        'content_type', u.content_type,
        'url', '/api/files/' || u.path,
        'poster_url', CASE WHEN u.kind = 'image' THEN '/api/files/' || u.path
                           WHEN u.poster_path IS NOT NULL THEN '/api/files/' || u.poster_path END,
        'width', u.width,
        'height', u.height,
        'duration_seconds', u.duration_seconds,
        'has_audio', u.has_audio,
        'original_name', u.original_name,
        'bytes', u.bytes,
        'created_at', unix_seconds(u.created_at))
$$;

CREATE FUNCTION reference_json(u uploads) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'image_id', u.id,
        'kind', u.kind,
        'url', '/api/files/' || u.path,
        'poster_url', CASE WHEN u.kind = 'image' THEN '/api/files/' || u.path
                           WHEN u.poster_path IS NOT NULL THEN '/api/files/' || u.poster_path END,
        'width', u.width,
        'height', u.height,
        'duration_seconds', u.duration_seconds)
$$;

CREATE FUNCTION generation_progress(g generations) RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN g.status = 'succeeded' THEN 1.0
        WHEN g.status <> 'processing' THEN 0.0
        ELSE CASE g.stage
            WHEN 'encoding_prompt' THEN 0.02
            WHEN 'encoding_references' THEN 0.04
            WHEN 'denoising' THEN round((0.05 + 0.85 * g.step / greatest(g.total_steps, 1))::numeric, 4)
            WHEN 'decoding_video' THEN 0.90
            WHEN 'decoding_audio' THEN 0.95
            WHEN 'writing' THEN 0.97
            ELSE 0.0 END
    END
$$;

CREATE FUNCTION generation_json(g generations) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'generation_id', g.id,
        'status', g.status,
        'model_name', 'minimax-h3',
        'media_type', 'video',
        'prompt', g.prompt,
        'partition', g.partition,
        'image_ids', to_jsonb(g.image_ids),
        'last_image_id', g.last_image_id,
        'references', COALESCE((SELECT jsonb_agg(reference_json(u) ORDER BY r.ord)
                                  FROM unnest(g.image_ids) WITH ORDINALITY AS r(id, ord)
                                  JOIN uploads u ON u.id = r.id), '[]'::jsonb),
        'last_image', (SELECT reference_json(u) FROM uploads u WHERE u.id = g.last_image_id),
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
        'result_url', CASE WHEN g.result_path IS NOT NULL THEN '/api/files/' || g.result_path END,
        'poster_url', CASE WHEN g.poster_path IS NOT NULL THEN '/api/files/' || g.poster_path END,
        'rating', g.rating,
        'error_message', g.error_message,
        'attempts', g.attempts,
        'cancel_requested', g.cancel_requested,
        'enqueued_at', unix_seconds(g.enqueued_at),
        'started_at', unix_seconds(g.started_at),
        'completed_at', unix_seconds(g.completed_at),
        'updated_at', unix_seconds(g.updated_at),
        'worker_id', g.worker_id,
        'placement', g.placement,
        'seq', g.seq)
$$;

-- A worker is online while its heartbeat is younger than the lease.
CREATE FUNCTION worker_json(w workers, lease_seconds double precision) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'worker_id', w.id,
        'hostname', w.hostname,
        'pid', w.pid,
        'engine_kind', w.engine_kind,
        'state', w.state,
        'message', w.message,
        'current_generation_id', w.current_generation_id,
        'started_at', unix_seconds(w.started_at),
        'heartbeat_at', unix_seconds(w.heartbeat_at),
        'online', w.state <> 'stopped' AND w.heartbeat_at > now() - make_interval(secs => lease_seconds))
$$;

-- GET /api/status. The engine summary comes from the best online worker:
-- a ready/busy one over a loading/starting one over a failed one.
CREATE FUNCTION status_json(version text, lease_seconds double precision) RETURNS jsonb LANGUAGE sql STABLE AS $$
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
        'queue', (SELECT jsonb_build_object(
                'queued', count(*) FILTER (WHERE status = 'queued'),
                'processing', count(*) FILTER (WHERE status = 'processing'),
                'succeeded', count(*) FILTER (WHERE status = 'succeeded'),
                'failed', count(*) FILTER (WHERE status = 'failed'),
                'cancelled', count(*) FILTER (WHERE status = 'cancelled')) FROM generations))
$$;
