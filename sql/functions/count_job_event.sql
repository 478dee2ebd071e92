-- count_job_event: BEFORE UPDATE OF status, progress on jobs (trigger jobs_event_seq,
-- migrations/V22).
--
-- Each change of a job's status or progress adds one to its event_seq, whichever statement or
-- release makes it: a live event's `sequence`, which a client orders frames by, and what a
-- push marked sent is compared with (a change after it queues the push again).
CREATE OR REPLACE FUNCTION count_job_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status OR NEW.progress IS DISTINCT FROM OLD.progress THEN
        NEW.event_seq := OLD.event_seq + 1;
    END IF;
    RETURN NEW;
END
$$;
