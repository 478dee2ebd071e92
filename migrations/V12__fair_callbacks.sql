-- Issue 19: callbacks shared fairly between keys when keys are cheap (DESIGN.md §9).
--
-- A claim used to take the oldest due callbacks and only then cap each key's share, so one key
-- with a large backlog filled every claim. Now it picks keys first: each callback carries its
-- job's client, an index orders the pending ones by client, and a claim walks the clients
-- with due callbacks from where the last claim stopped (job_callback_rotation), taking a few of
-- each (store/postgres/callbacks.rs).

ALTER TABLE job_callbacks ADD COLUMN client text;
UPDATE job_callbacks c SET client = j.client_ip FROM jobs j WHERE j.id = c.job_id;
ALTER TABLE job_callbacks ALTER COLUMN client SET NOT NULL;

-- Any insert that does not name the client (admit_job's, an earlier release's trigger) gets
-- the job's: admission's code and function stay as they are.
CREATE FUNCTION job_callback_client() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT client_ip INTO NEW.client FROM jobs WHERE id = NEW.job_id;
    RETURN NEW;
END
$$;

CREATE TRIGGER job_callbacks_client
    BEFORE INSERT ON job_callbacks
    FOR EACH ROW
    WHEN (NEW.client IS NULL)
    EXECUTE FUNCTION job_callback_client();

-- The claim's walk over clients (a skip scan: one probe per client), each client's due
-- callbacks oldest first, and the count of a client's undelivered callbacks.
CREATE INDEX job_callbacks_pending_by_client
    ON job_callbacks (client, available_at, id) WHERE status = 'pending';

-- The in-order check (a job's earlier pending callback), without a look at delivered ones.
CREATE INDEX job_callbacks_pending_by_job
    ON job_callbacks (job_id, sequence) WHERE status = 'pending';

-- Where the last claim's walk over clients stopped; the next one starts after it.
CREATE TABLE job_callback_rotation (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last_client text NOT NULL DEFAULT ''
);
INSERT INTO job_callback_rotation DEFAULT VALUES;

-- V10's trigger, and a bound on each client's undelivered callbacks: past
-- osurender.max_pending_callbacks_per_key (set for the transaction by the statement that
-- changes the job; 1000 if unset), a progress update in the same status is not queued. The
-- next status change is, with the job's progress as of then, so nothing but intermediate
-- progress is lost, and a job's sequence has no gap.
CREATE OR REPLACE FUNCTION queue_job_callback() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_cap bigint := coalesce(
        nullif(current_setting('osurender.max_pending_callbacks_per_key', true), '')::bigint,
        1000);
BEGIN
    IF NEW.status = OLD.status
       AND (NEW.progress = OLD.progress OR OLD.callback_at > now() - interval '5 seconds') THEN
        RETURN NEW;
    END IF;
    IF NEW.status = OLD.status
       AND (SELECT count(*) FROM (SELECT FROM job_callbacks
                                   WHERE client = NEW.client_ip AND status = 'pending'
                                   LIMIT v_cap) AS undelivered) >= v_cap THEN
        RETURN NEW;
    END IF;
    NEW.callback_seq := OLD.callback_seq + 1;
    NEW.callback_at := now();
    INSERT INTO job_callbacks (job_id, sequence, url, body, client)
    VALUES (NEW.id, NEW.callback_seq, NEW.callback_url,
            job_callback_body(NEW.id, NEW.callback_seq, NEW.status::text, NEW.progress,
                              NEW.error, now()),
            NEW.client_ip);
    RETURN NEW;
END
$$;
