-- admit_job, the 18-argument form migrations/V4 made: admission of an earlier release.
--
-- No code of this release calls it (it calls admit_job(jsonb), admit_job.sql); it stays
-- because code of a release before V5, which a rollback may run against this schema, still
-- does. Its behaviour is V4's and is not to change: the checks and the lock order are
-- admit_job(jsonb)'s (see there), without the fence, the sandbox, callbacks and the fair-share
-- caps.
CREATE OR REPLACE FUNCTION admit_job(
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
