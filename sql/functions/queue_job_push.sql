-- queue_job_push: AFTER INSERT on jobs (trigger jobs_push_inserts), and AFTER UPDATE OF
-- status, progress when event_seq moved (trigger jobs_push_changes), migrations/V22.
--
-- A job inserted or changed whose topic is watched unexpired (event_watches: `job#<id>`, or,
-- for an API key's job, `key#<client>`) gets its row in job_pushes, or has it due now again:
-- one row per job, so a burst of changes is one push of the latest state. The statement that
-- changes the job writes it, so no code path (nor an earlier release's) misses a change. An
-- unwatched job costs two index probes of an empty or small table.
CREATE OR REPLACE FUNCTION queue_job_push() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM event_watches
         WHERE topic IN ('job#' || NEW.id,
                         CASE WHEN NEW.client_ip LIKE 'key:%' THEN 'key#' || NEW.client_ip END)
           AND until > now()
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO job_pushes (job_id, client, sequence, due_at)
    VALUES (NEW.id, NEW.client_ip, NEW.event_seq, now())
    ON CONFLICT (job_id) DO UPDATE
       SET sequence = greatest(job_pushes.sequence, EXCLUDED.sequence),
           due_at = now(),
           attempts = 0,
           leased_until = NULL;
    RETURN NULL;
END
$$;
