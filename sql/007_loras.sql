-- mmh3 schema, version 7: the adapter catalogue.
--
-- mmh3-fcgi links nothing of the engine, so it cannot read adapter files;
-- the worker can. A worker publishes what $MODELS_PATH/loras holds (at start
-- and whenever the folder changes): one row per *.safetensors file, with
-- what its header says, or why it cannot be read. GET /api/loras returns
-- the rows; POST /api/ai/queue refuses a name that is not among them once a
-- catalogue was published (lora_catalog has its row). The workers of one
-- database are expected to share the folder (ComfyUI's layout on a shared
-- models path): the last publication wins.

CREATE TABLE IF NOT EXISTS loras (
    name       text PRIMARY KEY,          -- relative to the folder: "style/ink.safetensors"
    family     text NOT NULL DEFAULT '',  -- "LightX2V Turbo", "PDD Acc", "generic", ...
    rank       integer,
    alpha      real,
    targets    text NOT NULL DEFAULT '',
    bytes      bigint NOT NULL DEFAULT 0, -- the file's size
    preset     text,                      -- the sampler it was distilled for, or NULL
    forwards   integer,                   -- that sampler's forwards
    warnings   jsonb NOT NULL DEFAULT '[]',
    error      text,                      -- why the file cannot be used, or NULL
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row once a worker has published: who, when, how many.
CREATE TABLE IF NOT EXISTS lora_catalog (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    worker_id    text NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    count        integer NOT NULL DEFAULT 0
);
