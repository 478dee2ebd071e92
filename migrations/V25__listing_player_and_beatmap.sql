-- Issue 32: `GET /v1/jobs?player=…&beatmap_md5=…` (a player's jobs of one beatmap): a backward
-- range scan of the client's jobs of that player and beatmap from the cursor on, as V14's indexes
-- serve each filter alone. The same index range, cut at TOTAL_CAP + 1 entries, counts the
-- listing's `total` (ports/jobs.rs TOTAL_CAP).
CREATE INDEX jobs_by_client_player_beatmap_age
    ON jobs (client_ip, lower(replay ->> 'player'), (replay ->> 'beatmap_md5'), created_at, id);
