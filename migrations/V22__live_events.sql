-- Live job events (DESIGN.md §11): what the database keeps so a watched job's changes are
-- pushed to its WebSocket subscribers. The subscriptions themselves live in DynamoDB; here only
-- which topics are watched, and which jobs are owed a push.

-- Each change of a job's status or progress counts one (count_job_event): a live event's
-- `sequence`. Existing jobs start at 0.
ALTER TABLE jobs ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;

-- Topics some connection follows (`job#<uuid>`, `key#key:<uuid>`, as Topic::name writes
-- them), until the connection's longest life: a subscribe extends it. The janitor deletes the
-- ended ones in batches, oldest first.
CREATE TABLE event_watches (
    topic text PRIMARY KEY,
    until timestamptz NOT NULL
);
CREATE INDEX event_watches_until ON event_watches (until);

-- A job whose watchers are owed its state: one row per job (changes coalesce), its client (a
-- key's subscribers are sent it too), the event_seq it was queued at (a push marked sent for an
-- earlier one leaves the row), when it is due, and the dispatcher's claims. A claim moves
-- due_at to its lease's end, so due rows are one range of the index; a change makes it due now.
CREATE TABLE job_pushes (
    job_id uuid PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    client text NOT NULL,
    sequence bigint NOT NULL,
    due_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    leased_until timestamptz
);
CREATE INDEX job_pushes_due ON job_pushes (due_at);

-- The triggers' functions, as stubs: their bodies are sql/functions/count_job_event.sql and
-- queue_job_push.sql, applied after the migrations in their transaction.
CREATE FUNCTION count_job_event() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE FUNCTION queue_job_push() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

CREATE TRIGGER jobs_event_seq
    BEFORE UPDATE OF status, progress ON jobs
    FOR EACH ROW
    EXECUTE FUNCTION count_job_event();

CREATE TRIGGER jobs_push_inserts
    AFTER INSERT ON jobs
    FOR EACH ROW
    EXECUTE FUNCTION queue_job_push();
CREATE TRIGGER jobs_push_changes
    AFTER UPDATE OF status, progress ON jobs
    FOR EACH ROW
    WHEN (NEW.event_seq <> OLD.event_seq)
    EXECUTE FUNCTION queue_job_push();
