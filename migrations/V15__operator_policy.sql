-- Issue 21: the operator's controls over intake, set with `osurender-admin pause|resume|bans`
-- and read by every instance in one statement per POLICY_CACHE_TTL
-- (functions/core/src/adapters/postgres/policy.rs). Two new tables: the code of the previous
-- release never reads them (expand-first).

-- The intake's pause: a row while paused (`resume` deletes it). `one` keeps it to one row.
CREATE TABLE intake_pause (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    anonymous_only boolean NOT NULL,
    reason         text CHECK (char_length(reason) BETWEEN 1 AND 500),
    since          timestamptz NOT NULL DEFAULT now()
);

-- Bans of an address range (`ip`, a cidr), an API key (`key`, its id) or a player (`player`,
-- the name lowercased). `until` is 'infinity' for a ban until removed, so "in force" is one
-- range scan of `bans_in_force` (until > now()): ended bans are never read. `bans remove`
-- deletes the row.
CREATE TABLE bans (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('ip', 'key', 'player')),
    address    cidr CHECK ((kind = 'ip') = (address IS NOT NULL)),
    key_id     uuid CHECK ((kind = 'key') = (key_id IS NOT NULL)),
    player     text CHECK ((kind = 'player') = (player IS NOT NULL)
                           AND player = lower(player)
                           AND char_length(player) BETWEEN 1 AND 64),
    reason     text CHECK (char_length(reason) BETWEEN 1 AND 500),
    until      timestamptz NOT NULL DEFAULT 'infinity',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX bans_in_force ON bans (until);
