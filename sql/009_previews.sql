-- Live previews: the newest preview of each rendering job. The worker writes
-- the picture to <outputs>/previews/<id>.jpg (replaced at each preview) and
-- records it here in the statement that tells the event streams
-- (pg_notify kind 'preview', relayed as `generation_preview`); it removes
-- the file and the row when the job ends, whatever the outcome. The row is
-- gone with its generation too. Not part of generation_json: a preview is
-- worth showing only while it is fresh, and the next one is at most the
-- worker's preview interval away.
CREATE TABLE IF NOT EXISTS generation_previews (
    generation_id uuid PRIMARY KEY REFERENCES generations (id) ON DELETE CASCADE,
    seq           integer NOT NULL,     -- previews of this job so far (1, 2, ...): newer wins
    url           text NOT NULL,        -- under /api/files/previews/, with ?seq= so caches see each one
    step          integer NOT NULL,     -- forwards done when it was made
    total_steps   integer NOT NULL,
    frames        integer NOT NULL,     -- pictures side by side in the strip
    frame_width   integer NOT NULL,
    frame_height  integer NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
