-- What an operator sees of the queue in psql (`mmh3 db`, then `TABLE queue;`),
-- and which workers /api/status lists.

-- One line per generation, newest first: what it is doing, how often it
-- was started, its times (UTC, to the second) and the head of its prompt.
CREATE VIEW queue AS
    SELECT g.id,
           g.status,
           CASE WHEN g.status = 'processing' THEN g.stage END AS stage,
           CASE WHEN g.total_steps > 0 THEN g.step || '/' || g.total_steps END AS step,
           g.attempts,
           g.width || 'x' || g.height || ' ' || g.frames || 'f' AS canvas,
           date_trunc('second', g.enqueued_at AT TIME ZONE 'UTC') AS enqueued,
           date_trunc('second', g.started_at AT TIME ZONE 'UTC') AS started,
           date_trunc('second', g.completed_at AT TIME ZONE 'UTC') AS completed,
           CASE WHEN g.completed_at IS NOT NULL AND g.started_at IS NOT NULL
                THEN round(extract(epoch FROM g.completed_at - g.started_at)::numeric, 1) END AS seconds,
           g.worker_id AS worker,
           left(regexp_replace(g.prompt, '\s+', ' ', 'g'), 60) AS prompt_head,
           left(g.error_message, 80) AS error
      FROM generations g
     ORDER BY g.enqueued_at DESC, g.id DESC;

-- /api/status lists the workers alive now: a heartbeat within the lease and
-- not stopped. A worker that died (its process killed, its host gone) stops
-- beating and drops out after one lease instead of staying "busy" for a day.
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
                               FROM workers w JOIN online o USING (id)), '[]'::jsonb),
        'queue', (SELECT jsonb_object_agg(status, n) FROM generation_counts))
$$;
