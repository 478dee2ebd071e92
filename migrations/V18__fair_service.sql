-- Fair service (DESIGN.md "Fair service"): the jobs table is the queue of record, and a job's
-- render event reaches the render queue only when the farm has room for it, in start-time fair
-- queuing order of expected render-seconds, per client.
--
-- jobs.render_cost: the job's expected render-seconds (the replay's length at its mods' speed
--   plus RENDER_OVERHEAD_SECS), set by admit_job; NULL for a job of an earlier release.
-- jobs.fair_start, fair_finish: the job's start and finish tags in virtual time (start =
--   max(fair_clock, its fair client's last finish), finish = start + cost / weight).
-- jobs.released_at: when release_jobs put its event on the way to the render queue; NULL while
--   it waits in the queue of record. A job admitted before this migration already went to the
--   render queue, so it counts as released.
-- jobs.started_at: when a worker first reported the job (downloading or rendering): how long an
--   in-flight render has run, and how fast the farm renders.
-- fair_clock: the system virtual time, the largest start tag released so far (one row).
-- fair_clients: each fair client's (an anonymous network's, or a key's) last finish tag, so a
--   client that submits one job at a time still advances through virtual time; a row whose
--   finish the clock has passed says nothing more and is pruned by the janitor.
-- api_keys.weight: the key's share of render time relative to other clients (default 1).
--
-- The functions that use them: admit_job, release_jobs (sql/functions/).

ALTER TABLE jobs
    ADD COLUMN render_cost real,
    ADD COLUMN fair_start double precision,
    ADD COLUMN fair_finish double precision,
    ADD COLUMN released_at timestamptz,
    ADD COLUMN started_at timestamptz;

UPDATE jobs SET released_at = created_at WHERE status = 'queued';

-- The release order: the queued jobs not yet released, smallest start tag first.
CREATE INDEX jobs_fair_order ON jobs (fair_start, id) INCLUDE (render_cost)
    WHERE status = 'queued' AND released_at IS NULL;
-- Released jobs no worker has taken yet: at most RENDER_SLOTS + RELEASE_AHEAD rows.
CREATE INDEX jobs_released_waiting ON jobs (released_at, id) INCLUDE (render_cost)
    WHERE status = 'queued' AND released_at IS NOT NULL;
-- Jobs a worker is downloading or rendering, with how long each has run.
CREATE INDEX jobs_in_flight ON jobs (started_at) INCLUDE (render_cost)
    WHERE status IN ('downloading', 'rendering');
-- Whether any job released after a given one was started by a worker (the janitor's unclaimed
-- release: one probe).
CREATE INDEX jobs_started_by_release ON jobs (released_at) WHERE started_at IS NOT NULL;

CREATE TABLE fair_clock (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    virtual_time double precision NOT NULL DEFAULT 0
);
INSERT INTO fair_clock DEFAULT VALUES;

CREATE TABLE fair_clients (
    client text PRIMARY KEY,
    finish double precision NOT NULL
);
CREATE INDEX fair_clients_by_finish ON fair_clients (finish);

ALTER TABLE api_keys
    ADD COLUMN weight integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);

-- A function added with this migration (release_jobs) and admit_job's new body arrive from
-- sql/functions/ in the same transaction.
