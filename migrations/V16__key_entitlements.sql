-- Issue 21: what a key's renders may ask for, and how long a replay it may have rendered
-- (functions/core/src/domain/entitlement.rs, KeyLimits). Every new column is nullable or has a
-- default, so the keys of earlier releases read as before (everything permitted, the service's
-- MAX_REPLAY_LENGTH) and the previous release's code, which never names them, inserts and reads
-- keys as it did. Adding them rewrites nothing.

-- The highest resolution a render may ask for; NULL: any.
ALTER TABLE api_keys ADD COLUMN max_resolution text
    CHECK (max_resolution IN ('720p', '1080p', '1440p', '4k'));

-- The render options a render may not turn on, by form field name. A later release that adds a
-- deniable option widens this check; code that does not know a name ignores it (it cannot render
-- that option either).
ALTER TABLE api_keys ADD COLUMN denied_options text[] NOT NULL DEFAULT '{}'
    CHECK (denied_options <@ ARRAY['motion_blur', 'storyboard', 'video', 'skin']);

-- Seconds of play at most (at the mods' speed); NULL: the service's MAX_REPLAY_LENGTH.
ALTER TABLE api_keys ADD COLUMN max_replay_length_secs integer
    CHECK (max_replay_length_secs BETWEEN 1 AND 86400);
