-- The job lifecycle: webhook nonces, and an admission that hands its outbox event to the
-- render function's fast path (DESIGN.md §6).

-- Nonces of signed webhook reports, each kept until its report's timestamp could no longer be
-- accepted anyway; the janitor deletes the expired ones. The primary key is what detects reuse:
-- `INSERT … ON CONFLICT DO NOTHING` inserts nothing for a nonce seen before, and a concurrent
-- insert of the same nonce waits for the first and then inserts nothing too.
CREATE TABLE webhook_nonces (
    nonce      text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

CREATE INDEX webhook_nonces_by_expiry ON webhook_nonces (expires_at);

-- admit_job now takes the event payload (built by the caller, which publishes that very payload
-- right after commit) and answers the event's id with the verdict, so the fast path needs no
-- extra round trip to learn it. The event is inserted as already leased to that fast path:
-- `attempts = 1` and `available_at` one lease ahead, so the sweep leaves it alone while the
-- admitting function publishes it, and delivers it when that publish failed or the function died.
-- The return type changes, so the V1 function is dropped rather than replaced.
DROP FUNCTION admit_job(uuid, text, bigint, bigint, text, jsonb, text, bigint, bigint, bigint, bigint);

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
    OUT verdict text,
    OUT event_id bigint
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_queued bigint;
    v_rendering bigint;
    v_active bigint;
BEGIN
    -- Lock order, snapshots and the checks are as in V1: see there.
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    PERFORM pg_advisory_xact_lock(p_client_lock);
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

    INSERT INTO jobs (id, client_ip, skin, config, replay_key)
    VALUES (p_id, p_client_ip, p_skin, p_config, p_replay_key);
    INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
    VALUES (p_id, 'render_job_created', p_event_payload, 1,
            now() + p_event_lease_ms * interval '1 millisecond')
    RETURNING id INTO event_id;
    verdict := 'admitted';
END
$$;
