-- Issue 19: callbacks shared fairly between keys when keys are cheap (DESIGN.md §9).
--
-- A claim used to take the oldest due callbacks and only then cap each key's share, so one key
-- with a large backlog filled every claim. Now it picks keys first: each callback carries its
-- job's client, an index orders the pending ones by client, and a claim walks the clients
-- with due callbacks from where the last claim stopped (callback_dispatch), taking a few of
-- each (store/postgres/callbacks.rs). A client's undelivered callbacks are bounded: past the
-- bound, progress-only updates are coalesced into the next status change.

-- Only pending callbacks are read by client (the claim, the bound below), so only they are
-- backfilled: the delivered and failed ones kept for 30 days keep NULL, and the migration
-- rewrites no history under its locks.
ALTER TABLE job_callbacks ADD COLUMN client text;
UPDATE job_callbacks c SET client = j.client_ip
  FROM jobs j
 WHERE j.id = c.job_id AND c.status = 'pending';

-- A due callback is its job's earliest pending one (store/postgres/callbacks.rs moves a job's
-- later callbacks with a retry): the ones already queued behind a backing-off callback wait
-- for it too.
UPDATE job_callbacks c SET available_at = e.available_at
  FROM (SELECT DISTINCT ON (job_id) job_id, sequence, available_at
          FROM job_callbacks WHERE status = 'pending'
         ORDER BY job_id, sequence) e
 WHERE c.job_id = e.job_id AND c.sequence > e.sequence AND c.status = 'pending'
   AND c.available_at < e.available_at;

-- Every insert gets the job's client if it names none (admit_job's, an earlier release's
-- trigger: admission's code and function stay as they are), and waits for the job's pending
-- callbacks (a retry's backoff, a lease; the marks make it due once they end), so it is not
-- due while an earlier one is not sent.
CREATE FUNCTION job_callback_client() RETURNS trigger
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

CREATE TRIGGER job_callbacks_client
    BEFORE INSERT ON job_callbacks
    FOR EACH ROW
    EXECUTE FUNCTION job_callback_client();

-- The claim's walk over clients (a skip scan: one probe per client), each client's due
-- callbacks oldest first, and the count of a client's undelivered callbacks.
CREATE INDEX job_callbacks_pending_by_client
    ON job_callbacks (client, available_at, id) WHERE status = 'pending';

-- The in-order check (a job's earlier pending callback), without a look at delivered ones.
CREATE INDEX job_callbacks_pending_by_job
    ON job_callbacks (job_id, sequence) WHERE status = 'pending';

-- The claim's signing secrets: a claimed callback's key, by the client name its job records
-- (`key:<id>`), without a scan of every key (keys are cheap to make).
CREATE INDEX api_keys_by_client ON api_keys (('key:' || id::text));

-- The dispatcher's state, one row: where the last claim's walk over clients stopped (the next
-- one starts after it), and the bound on a client's undelivered callbacks, as each claim
-- records it from the dispatcher's MAX_PENDING_CALLBACKS_PER_KEY (the trigger below reads it).
CREATE TABLE callback_dispatch (
    only_row            boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last_client         text NOT NULL DEFAULT '',
    max_pending_per_key bigint NOT NULL DEFAULT 1000 CHECK (max_pending_per_key > 0)
);
INSERT INTO callback_dispatch DEFAULT VALUES;

-- V10's trigger, and a bound on each client's undelivered callbacks: at
-- callback_dispatch.max_pending_per_key, a progress update in the same status is not queued.
-- The next status change is, with the job's progress as of then, so nothing but intermediate
-- progress is lost, and a job's sequence has no gap. (The bound lives in the database rather
-- than in each statement that changes a job: those are many, and an earlier release's too.)
CREATE OR REPLACE FUNCTION queue_job_callback() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_cap bigint := (SELECT max_pending_per_key FROM callback_dispatch);
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

-- The instance's list of live API keys (KeyStore::live_hashes, loaded only when a key
-- lookup's gate refuses): read from this index alone, not a scan of every key ever issued.
CREATE INDEX api_keys_live ON api_keys (key_hash) WHERE revoked_at IS NULL;
