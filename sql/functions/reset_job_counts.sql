-- reset_job_counts: job_counts after a TRUNCATE of jobs (trigger jobs_count_truncates,
-- migrations/V11). TRUNCATE has no transition table: the table is empty after it.
CREATE OR REPLACE FUNCTION reset_job_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_counts SET queued = 0, rendering = 0, anonymous_queued = 0;
    RETURN NULL;
END
$$;
