-- mmh3 schema, version 3: access tokens for the HTTP API (docs/SECURITY.md).
--
-- Only the SHA-256 of each token is stored; the token itself (256 random
-- bits) is shown once, when `mmh3 token create` or the first `mmh3 serve`
-- makes it. A revoked token keeps its row (when, and its name) until a new
-- token takes the name. Whoever can write this table (a psql user of the
-- database) is trusted: the database is the security boundary.
--
-- Changes that matter to a running API (new, revoked, replaced tokens) are
-- announced on mmh3_events, so every mmh3-fcgi drops its token cache and
-- closes the event streams of a revoked token at once.

CREATE TABLE api_tokens (
    name         text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
    token_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE FUNCTION api_tokens_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mmh3_events', json_build_object('kind', 'tokens')::text);
    RETURN NULL;
END $$;

CREATE TRIGGER api_tokens_notify AFTER INSERT OR DELETE OR UPDATE OF token_sha256, revoked_at ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION api_tokens_notify();
