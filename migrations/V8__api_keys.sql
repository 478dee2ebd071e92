-- Issue 13: API keys. A client sends `Authorization: Bearer osr_live_…`; only the key's SHA-256
-- is kept (key_hash), so neither this table nor a backup of it can be used to authenticate. The
-- key is shown once, by `osurender-admin keys create` (functions/core/src/keys/).
--
-- A revoked key keeps its row (revoked_at set): its id stays the client of its jobs, and the
-- revocation is visible in `keys list`. The signing secret is kept as it is: the service signs
-- the key's callbacks with it.
CREATE TABLE api_keys (
    id                       uuid PRIMARY KEY,
    name                     text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    -- SHA-256 of the whole key; UNIQUE is also the index every request's lookup uses.
    key_hash                 bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    kind                     text NOT NULL CHECK (kind IN ('live', 'sandbox')),
    -- The render rate limit: render_limit_requests per render_limit_period_secs.
    render_limit_requests    integer NOT NULL CHECK (render_limit_requests > 0),
    render_limit_period_secs bigint NOT NULL CHECK (render_limit_period_secs > 0),
    max_active               integer NOT NULL CHECK (max_active > 0),
    signing_secret           text NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    revoked_at               timestamptz
);

-- `keys list`: the newest first, bounded.
CREATE INDEX api_keys_by_age ON api_keys (created_at DESC, id);
