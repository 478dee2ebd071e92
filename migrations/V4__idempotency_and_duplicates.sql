-- Issue 7: idempotent submissions, duplicate replays, and what estimates are made from.

-- The SHA-256 of a job's replay file: a client's second submission of a replay it already has
-- queued or rendering is answered with that job (409 `duplicate_replay`). NULL for jobs admitted
-- before this migration and by the Python fleet, which never count as duplicates.
ALTER TABLE jobs ADD COLUMN replay_sha256 bytea;

-- At most one active job per client and replay, whoever inserts: admit_job re-checks under the
-- client's lock, and this index makes a bug or another writer fail loudly instead of doubling.
CREATE UNIQUE INDEX jobs_active_replay ON jobs (client_ip, replay_sha256)
    WHERE status IN ('queued', 'downloading', 'rendering') AND replay_sha256 IS NOT NULL;

-- Render throughput (Retry-After and `estimated_start`) counts the jobs completed in the last
-- hour; this keeps that count to the recent rows however long the history grows.
CREATE INDEX jobs_completed_by_update ON jobs (updated_at) WHERE status = 'completed';

-- `Idempotency-Key` claims (functions/core/src/idempotency.rs). A request with a key inserts its
-- row `in_progress` before anything else happens; of concurrent requests with one key exactly one
-- inserts, the others wait for its outcome. Success stores the response and marks the row
-- `completed` (for a render, in admit_job's transaction, together with the job); a refusal
-- deletes the row so a retry runs afresh. `token` tells the claim's owner from a later one that
-- took a stale claim over. Rows expire after 24 h; the janitor deletes them.
CREATE TABLE idempotency_keys (
    client_ip    text NOT NULL,
    endpoint     text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    token        uuid NOT NULL,
    status       text NOT NULL DEFAULT 'in_progress' CHECK (status IN ('in_progress', 'completed')),
    -- {"status": 202, "location": "/v1/jobs/…", "body": {…}} once completed.
    response     jsonb,
    job_id       uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (client_ip, endpoint, key)
);

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

-- admit_job learns the replay hash and the idempotency claim to complete. The duplicate check
-- runs under the client's lock (duplicates are per client, and that lock serializes one client's
-- admissions, also against a Python fleet) and before the global lock, so a duplicate never
-- waits for, or holds up, anyone else's admission. The claim is completed in the job's own
-- transaction: a job exists exactly when its key answers with it.
-- The signature changes (new parameters and OUT column), so the V2 function is dropped.
DROP FUNCTION admit_job(uuid, text, bigint, bigint, text, jsonb, text, bigint, bigint, bigint,
                        bigint, jsonb, bigint);

CREATE FUNCTION admit_job(
    p_id uuid,
    p_client_ip text,
    p_client_lock bigint,
    p_global_lock bigint,
    p_skin text,
    p_config jsonb,
    p_replay_key text,
    p_max_queued bigint,
    p_max_rendering bigint,
    p_max_active_per_client bigint,
    p_lock_timeout_ms bigint,
    p_event_payload jsonb,
    p_event_lease_ms bigint,
    p_replay_sha256 bytea,
    p_idem_endpoint text,
    p_idem_key text,
    p_idem_token uuid,
    p_idem_response jsonb,
    OUT verdict text,
    OUT event_id bigint,
    OUT existing_job uuid
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_queued bigint;
    v_rendering bigint;
    v_active bigint;
BEGIN
    -- Lock order, snapshots and the capacity checks are as in V1: see there.
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    PERFORM pg_advisory_xact_lock(p_client_lock);

    SELECT id INTO existing_job
      FROM jobs
     WHERE client_ip = p_client_ip AND replay_sha256 = p_replay_sha256
       AND status IN ('queued', 'downloading', 'rendering')
     LIMIT 1;
    IF existing_job IS NOT NULL THEN
        verdict := 'duplicate';
        RETURN;
    END IF;

    PERFORM pg_advisory_xact_lock(p_global_lock);

    SELECT count(*) FILTER (WHERE status = 'queued'),
           count(*) FILTER (WHERE status IN ('downloading', 'rendering'))
      INTO v_queued, v_rendering
      FROM jobs
     WHERE status IN ('queued', 'downloading', 'rendering');
    IF v_queued >= p_max_queued THEN
        verdict := 'queue_full';
        RETURN;
    END IF;
    IF v_rendering >= p_max_rendering THEN
        verdict := 'render_capacity';
        RETURN;
    END IF;

    SELECT count(*) INTO v_active
      FROM jobs
     WHERE client_ip = p_client_ip AND status IN ('queued', 'downloading', 'rendering');
    IF v_active >= p_max_active_per_client THEN
        verdict := 'too_many_active_jobs';
        RETURN;
    END IF;

    INSERT INTO jobs (id, client_ip, skin, config, replay_key, replay_sha256)
    VALUES (p_id, p_client_ip, p_skin, p_config, p_replay_key, p_replay_sha256);
    INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
    VALUES (p_id, 'render_job_created', p_event_payload, 1,
            now() + p_event_lease_ms * interval '1 millisecond')
    RETURNING id INTO event_id;
    IF p_idem_token IS NOT NULL THEN
        UPDATE idempotency_keys
           SET status = 'completed', response = p_idem_response, job_id = p_id
         WHERE client_ip = p_client_ip AND endpoint = p_idem_endpoint AND key = p_idem_key
           AND token = p_idem_token;
    END IF;
    verdict := 'admitted';
END
$$;
