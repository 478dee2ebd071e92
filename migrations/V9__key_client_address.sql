-- Issue 13: with an API key the key is the client (jobs.client_ip holds `key:<uuid>`), but the
-- address a key client's job came from is still recorded: client_addr, the address as admission
-- counts an anonymous client (an IPv4 address or an IPv6 /64). NULL for an anonymous client's
-- job (client_ip is its address) and for jobs admitted before this migration. Adding a nullable
-- column without a default rewrites nothing.
ALTER TABLE jobs ADD COLUMN client_addr text;

-- admit_job as V5 made it, and one more optional key: client_addr. A caller that does not send
-- it (the code of an earlier release) admits as before, with client_addr NULL.
CREATE OR REPLACE FUNCTION admit_job(
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

    INSERT INTO jobs (id, client_ip, client_addr, skin, config, replay_key, replay_sha256)
    VALUES (v_id, v_client, p ->> 'client_addr', p ->> 'skin', p -> 'config', p ->> 'replay_key',
            v_hash);
    INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
    VALUES (v_id, 'render_job_created', p -> 'event_payload', 1,
            now() + (p ->> 'event_lease_ms')::bigint * interval '1 millisecond')
    RETURNING id INTO event_id;
    verdict := 'admitted';
END
$$;
