-- A sandbox job's callback schedule, queued at its admission, keeps to the bound on a key's
-- undelivered callbacks as a live job's updates do: admit_job and queue_job_callback decide it
-- by one function, callback_backlog_full (sql/functions/). This migration records that change
-- in the history: an older release deployed again sees a newer schema and leaves the functions
-- alone, rather than putting its own bodies back (sql/functions/README.md).
COMMENT ON FUNCTION queue_job_callback() IS
    'Queues a callback with each status change of a job that has one, and its progress under '
    'the key''s bound on undelivered callbacks (sql/functions/queue_job_callback.sql).';
