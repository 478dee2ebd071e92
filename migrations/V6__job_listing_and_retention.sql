-- Issue 11: a client lists only its own jobs, a cursor page at a time, and old history goes.

-- `GET /v1/jobs` reads the caller's own jobs newest first, `(created_at, id)` descending, and
-- continues after a cursor's `(created_at, id)`: an index range scan (backward) that reads one
-- page however many jobs others have. With a status filter, compared as the enum, the second
-- index keeps it to that status's rows.
CREATE INDEX jobs_by_client_age ON jobs (client_ip, created_at, id);
CREATE INDEX jobs_by_client_status_age ON jobs (client_ip, status, created_at, id);

-- The old list read every client's jobs by this one; nothing reads by it now, and it cost every
-- insert. (A rolled-back release still lists correctly, by scanning.)
DROP INDEX jobs_by_age;

-- The janitor deletes jobs ended longer than `JOB_RETENTION` ago, oldest first, a bounded batch
-- per statement: this keeps each batch to the rows it deletes. A job's `updated_at` is when it
-- ended, since a final state never moves again.
CREATE INDEX jobs_ended_by_update ON jobs (updated_at)
    WHERE status IN ('completed', 'failed', 'expired');
