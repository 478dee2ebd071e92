-- Issue 11: skin names compare case-insensitively and without surrounding spaces, the skin list
-- pages through this table, and a presigned upload is ingested once.

-- The name a skin is compared by (functions/core/src/ports/skins.rs NameState): trimmed of
-- spaces and lowercased. Names are ASCII (the CHECK), so `lower` is Unicode's lowercase too,
-- whatever the database's collation. New names arrive trimmed; older ones may not be.
ALTER TABLE skins ADD COLUMN folded text GENERATED ALWAYS AS (lower(btrim(name, ' '))) STORED;

-- Names registered before this migration may fold alike (`Name`, `name `, `NAME`). None is
-- renamed or deleted: jobs refer to them, and their objects are `skins/{name}.osk` under the exact
-- name. One of each such group holds the folded name (the first stored, else the first claimed);
-- the others are `shadowed`: still listed and renderable under their exact names, but they hold
-- no folded name, so the unique index below tolerates them.
ALTER TABLE skins ADD COLUMN shadowed boolean NOT NULL DEFAULT false;

WITH ranked AS (
    SELECT name,
           row_number() OVER (PARTITION BY folded
                              ORDER BY stored_at IS NULL, stored_at, claimed_at, name) AS rank
      FROM skins
)
UPDATE skins SET shadowed = true
  FROM ranked
 WHERE skins.name = ranked.name AND ranked.rank > 1;

-- A shadowed claim never confirmed, older than any upload runs (15 min), is a dead upload's:
-- dropped, so every shadowed row left is a stored skin (or an upload running right now).
DELETE FROM skins
 WHERE shadowed AND stored_at IS NULL AND claimed_at < now() - interval '15 minutes';

-- Of two uploads of names folding alike, exactly one claims (the ON CONFLICT arbiter).
CREATE UNIQUE INDEX skins_folded ON skins (folded) WHERE NOT shadowed;

-- GET /v1/skins: stored names in byte order, a page after a cursor (keyset on the name).
CREATE INDEX skins_listed ON skins (name COLLATE "C") WHERE stored_at IS NOT NULL;

-- Presigned uploads being or having been ingested, by upload key (one per presigned policy).
-- The first version claimed binds the key to its ETag: a later POST to the same policy is never
-- ingested. `claim` is the running ingest's token; NULL once it released the key after a
-- failure (the next delivery of that version runs at once). A claim older than any ingest runs
-- is taken over. `finished_at`: published or refused, for good. The janitor deletes rows a day
-- old, long after the policy (15 min) and the event's retries have ended.
CREATE TABLE skin_ingests (
    key         text PRIMARY KEY,
    etag        text NOT NULL,
    claim       uuid,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE INDEX skin_ingests_by_age ON skin_ingests (claimed_at);
