-- Issue 21: a job says what it renders, a listing finds a player's or a beatmap's jobs, and a
-- replay whose render failed is not rendered again and again.

-- What the replay's header and frames say (domain/replay/info.rs), parsed once at admission
-- (admit_job's optional key `replay`); NULL for the jobs of earlier releases.
ALTER TABLE jobs ADD COLUMN replay jsonb;

-- `GET /v1/jobs?player=` (case-insensitive) and `?beatmap_md5=`: a backward range scan of the
-- client's jobs of that player or beatmap, from the cursor on, as jobs_by_client_age does for
-- the unfiltered listing (V6). The texts are at most 64 characters (info.rs), far below a
-- btree entry's limit.
CREATE INDEX jobs_by_client_player_age
    ON jobs (client_ip, lower(replay ->> 'player'), created_at, id);
CREATE INDEX jobs_by_client_beatmap_age
    ON jobs (client_ip, (replay ->> 'beatmap_md5'), created_at, id);

-- Why a failed job failed: a code of the documented set (domain/failure.rs), and whether
-- submitting the replay again may help. NULL for a job that did not fail, and for the
-- failures of earlier releases.
ALTER TABLE jobs ADD COLUMN error_code text, ADD COLUMN error_retryable boolean;

-- Admission's look (step 3b) reads the latest failed real render of the submitted replay
-- within REPLAY_FAILURE_COOLDOWN, for a reason that is the replay's own (FailureCode::
-- THE_REPLAYS: not a skin, the service or a download; a failure without a code, as earlier
-- releases record them, does not count): one index entry, however many jobs there are.
CREATE INDEX jobs_failed_by_replay ON jobs (replay_sha256, updated_at)
    WHERE status = 'failed' AND NOT sandbox
      AND error_code IN ('beatmap_not_found', 'replay_unrenderable');

-- Callbacks carry the job's `replay`, `error_code` and `retryable` too, and a completed job's
-- links to its video and thumbnail: job_callback_body takes them (sql/functions/), and admit_job
-- and queue_job_callback pass them.
DROP FUNCTION job_callback_body(uuid, integer, text, real, text, timestamptz);
