-- Issue 10: an admission whose answer never came is resolved, never guessed.
--
-- When the server gets no answer to admit_job in time (a slow link, a connection lost after the
-- commit was sent), the statement may have committed, or may still be on its way and commit
-- later. resolve_admission settles it: under the client's advisory lock, which admit_job holds
-- from before its first check to its commit, it either finds the job (committed) or fences the
-- job id, so that an admit_job of that id arriving later refuses. Either way the answer is final.

-- Job ids given up on by resolve_admission. Kept a day (far longer than any statement can be
-- in flight: the pool abandons one after DB_TIMEOUT_MS, RDS Proxy's borrow timeout is 120 s),
-- then deleted by the janitor.
CREATE TABLE admission_fences (
    job_id     uuid PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX admission_fences_by_age ON admission_fences (created_at);

CREATE FUNCTION resolve_admission(p_id uuid, p_client_lock bigint, p_lock_timeout_ms bigint)
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

-- admit_job takes one jsonb argument from now on, so a later change is a CREATE OR REPLACE
-- rather than a DROP and a new signature. Keys: id, client_ip, client_lock, global_lock, skin,
-- config, replay_key, replay_sha256 (hex), max_queued, max_rendering, max_active_per_client,
-- lock_timeout_ms, event_payload, event_lease_ms and, with an Idempotency-Key, idem_endpoint,
-- idem_key, idem_token, idem_response.
--
-- Besides V4's checks it refuses:
-- - 'abandoned': resolve_admission gave this job id up (the request was told 503);
-- - 'claim_lost': the request's idempotency claim is no longer its own (released, or taken over
--   as stale). The key is completed before the job is inserted, and only if it still is this
--   request's claim, so a job with a key exists exactly when its key answers with it.
--
-- The 18-argument V4 function stays: code of an earlier release, which a rollback may run
-- against this schema, still calls it.
CREATE FUNCTION admit_job(
    p jsonb,
    OUT verdict text,
    OUT event_id bigint,
    OUT existing_job uuid
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_id uuid := (p ->> 'id')::uuid;
    v_client text := p ->> 'client_ip';
    v_hash bytea := decode(p ->> 'replay_sha256', 'hex');
    v_idem_token uuid := (p ->> 'idem_token')::uuid;
    v_queued bigint;
    v_rendering bigint;
    v_active bigint;
BEGIN
    -- Lock order, snapshots and the capacity checks are as in V1: see there.
    PERFORM set_config('lock_timeout', (p ->> 'lock_timeout_ms') || 'ms', true);
    PERFORM pg_advisory_xact_lock((p ->> 'client_lock')::bigint);

    IF EXISTS (SELECT FROM admission_fences WHERE job_id = v_id) THEN
        verdict := 'abandoned';
        RETURN;
    END IF;

    SELECT id INTO existing_job
      FROM jobs
     WHERE client_ip = v_client AND replay_sha256 = v_hash
       AND status IN ('queued', 'downloading', 'rendering')
     LIMIT 1;
    IF existing_job IS NOT NULL THEN
        verdict := 'duplicate';
        RETURN;
    END IF;

    PERFORM pg_advisory_xact_lock((p ->> 'global_lock')::bigint);

    SELECT count(*) FILTER (WHERE status = 'queued'),
           count(*) FILTER (WHERE status IN ('downloading', 'rendering'))
      INTO v_queued, v_rendering
      FROM jobs
     WHERE status IN ('queued', 'downloading', 'rendering');
    IF v_queued >= (p ->> 'max_queued')::bigint THEN
        verdict := 'queue_full';
        RETURN;
    END IF;
    IF v_rendering >= (p ->> 'max_rendering')::bigint THEN
        verdict := 'render_capacity';
        RETURN;
    END IF;

    SELECT count(*) INTO v_active
      FROM jobs
     WHERE client_ip = v_client AND status IN ('queued', 'downloading', 'rendering');
    IF v_active >= (p ->> 'max_active_per_client')::bigint THEN
        verdict := 'too_many_active_jobs';
        RETURN;
    END IF;

    IF v_idem_token IS NOT NULL THEN
        UPDATE idempotency_keys
           SET status = 'completed', response = p -> 'idem_response', job_id = v_id
         WHERE client_ip = v_client AND endpoint = p ->> 'idem_endpoint'
           AND key = p ->> 'idem_key' AND token = v_idem_token AND status = 'in_progress';
        IF NOT FOUND THEN
            verdict := 'claim_lost';
            RETURN;
        END IF;
    END IF;

    INSERT INTO jobs (id, client_ip, skin, config, replay_key, replay_sha256)
    VALUES (v_id, v_client, p ->> 'skin', p -> 'config', p ->> 'replay_key', v_hash);
    INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
    VALUES (v_id, 'render_job_created', p -> 'event_payload', 1,
            now() + (p ->> 'event_lease_ms')::bigint * interval '1 millisecond')
    RETURNING id INTO event_id;
    verdict := 'admitted';
END
$$;
