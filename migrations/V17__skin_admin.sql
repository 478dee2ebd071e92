-- Issue 21: the operator's `skins remove` and `skins reserve` (functions/core/src/usecases/skins/
-- admin.rs). Additions only: the previous release's code, which names none of them, runs as
-- before (it lists and renders a removed skin, and lets a reserved name be uploaded, until it is
-- replaced).

-- A skin the operator removed: no longer listed nor renderable. Its object (skins/{name}.osk) is
-- kept for the jobs that name it, so the row keeps its folded name and no upload can claim it
-- again: an upload never writes over an object, and one finding the old object would bring the
-- removed skin back.
ALTER TABLE skins ADD COLUMN removed_at timestamptz;

-- `skins remove` marks every stored row of a folded name, the shadowed ones (V7) too.
CREATE INDEX skins_by_folded ON skins (folded);

-- GET /v1/skins: the stored skins not removed, in byte order (skins_listed serves the previous
-- release's listing until a later migration drops it).
CREATE INDEX skins_listed_kept ON skins (name COLLATE "C")
    WHERE stored_at IS NOT NULL AND removed_at IS NULL;

-- Names no upload may claim (official skins), by folded name. A skin of that name stored before
-- its reservation stays listed and renderable; no upload can take the name over.
CREATE TABLE skin_reservations (
    folded      text PRIMARY KEY CHECK (folded = lower(name)),
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9_ -]{1,128}$'),
    reserved_at timestamptz NOT NULL DEFAULT now()
);
