-- queue_job_callback: BEFORE UPDATE OF status, progress on jobs, for a job with a callback_url
-- that is not a sandbox job (trigger jobs_queue_callback, migrations/V10).
--
-- Each status change of a job with a callback, and a progress change once 5 s have passed
-- since its last callback (so a worker reporting every second costs the client one POST in 5),
-- gets a row in job_callbacks, numbered per job, written by the statement that changes the job,
-- so no change is missed whichever code path or release makes it.
--
-- A bound on each client's undelivered callbacks (migrations/V12; callback_backlog_full): at
-- callback_dispatch.max_pending_per_key, a progress update in the same status is not queued.
-- The next status change is, with the job's progress as of then, so nothing but intermediate
-- progress is lost, and a job's sequence has no gap. (The bound lives in the database rather
-- than in each statement that changes a job: those are many, and an earlier release's too.)
CREATE OR REPLACE FUNCTION queue_job_callback() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status
       AND (NEW.progress = OLD.progress OR OLD.callback_at > now() - interval '5 seconds') THEN
        RETURN NEW;
    END IF;
    IF NEW.status = OLD.status AND callback_backlog_full(NEW.client_ip, 0) THEN
        RETURN NEW;
    END IF;
    NEW.callback_seq := OLD.callback_seq + 1;
    NEW.callback_at := now();
    INSERT INTO job_callbacks (job_id, sequence, url, body, client)
    VALUES (NEW.id, NEW.callback_seq, NEW.callback_url,
            job_callback_body(NEW.id, NEW.callback_seq, NEW.status::text, NEW.progress,
                              NEW.error, now(), NEW.replay, NEW.error_code,
                              NEW.error_retryable, NEW.thumb_key IS NOT NULL),
            NEW.client_ip);
    RETURN NEW;
END
$$;
