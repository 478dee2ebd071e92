-- job_callback_client: BEFORE INSERT on job_callbacks (trigger job_callbacks_client,
-- migrations/V12).
--
-- Every insert gets the job's client if it names none (admit_job's, an earlier release's
-- trigger: admission's code and function stay as they are), and waits for the job's pending
-- callbacks (a retry's backoff, a lease; the marks make it due once they end), so it is not
-- due while an earlier one is not sent.
CREATE OR REPLACE FUNCTION job_callback_client() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.client IS NULL THEN
        SELECT client_ip INTO NEW.client FROM jobs WHERE id = NEW.job_id;
    END IF;
    NEW.available_at := greatest(NEW.available_at,
                                 (SELECT max(available_at) FROM job_callbacks
                                   WHERE job_id = NEW.job_id AND status = 'pending'));
    RETURN NEW;
END
$$;
