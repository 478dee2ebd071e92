-- resolve_admission: an admission whose answer never came is resolved, never guessed.
--
-- When the server gets no answer to admit_job in time (a slow link, a connection lost after the
-- commit was sent), the statement may have committed, or may still be on its way and commit
-- later. resolve_admission settles it: under the client's advisory lock, which admit_job holds
-- from before its first check to its commit, it either finds the job (committed: 'admitted') or
-- fences the job id in admission_fences ('abandoned'), so that an admit_job of that id arriving
-- later refuses. Either way the answer is final.
--
-- The job is read by a statement of its own after the lock is taken: under READ COMMITTED it
-- gets a snapshot from then, which sees the job of an admission that held the lock and
-- committed. Read before the lock, or in one statement with it (a SQL function), the snapshot
-- would be older, and a committed job would be fenced and reported abandoned
-- (tests/api/outcomes.rs holds an admission open in another session to check it).
CREATE OR REPLACE FUNCTION resolve_admission(p_id uuid, p_client_lock bigint, p_lock_timeout_ms bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    -- Waits for an admit_job of this client that is running; one that has not started yet
    -- will see the fence (each statement of a VOLATILE function takes a fresh snapshot).
    PERFORM pg_advisory_xact_lock(p_client_lock);
    IF EXISTS (SELECT FROM jobs WHERE id = p_id) THEN
        RETURN 'admitted';
    END IF;
    INSERT INTO admission_fences (job_id) VALUES (p_id) ON CONFLICT DO NOTHING;
    RETURN 'abandoned';
END
$$;
