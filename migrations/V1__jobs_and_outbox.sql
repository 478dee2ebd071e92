-- Jobs and their outbox events (DESIGN.md §5).

CREATE TYPE job_status AS ENUM ('queued', 'downloading', 'rendering', 'completed', 'failed', 'expired');

CREATE TABLE jobs (
    id          uuid PRIMARY KEY,
    status      job_status NOT NULL DEFAULT 'queued',
    -- The client key limits are counted by: an IPv4 address or an IPv6 /64, as the original's
    -- `client_ip`, so a Python fleet on the same database counts the same rows.
    client_ip   text NOT NULL,
    skin        text NOT NULL,
    config      jsonb NOT NULL,
    replay_key  text NOT NULL,
    progress    real NOT NULL DEFAULT 0 CHECK (progress >= 0 AND progress <= 100),
    error       text,
    video_key   text,
    thumb_key   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deadline_at timestamptz
);

-- Admission counts only ever read active jobs: these stay small however long the history grows.
CREATE INDEX jobs_active_by_client ON jobs (client_ip)
    WHERE status IN ('queued', 'downloading', 'rendering');
CREATE INDEX jobs_active_by_status ON jobs (status)
    WHERE status IN ('queued', 'downloading', 'rendering');
CREATE INDEX jobs_queued_by_age ON jobs (created_at) WHERE status = 'queued';
CREATE INDEX jobs_by_age ON jobs (created_at DESC);

CREATE TABLE outbox_events (
    id            bigserial PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    event_type    text NOT NULL,
    payload       jsonb NOT NULL,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dispatched', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    available_at  timestamptz NOT NULL DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    last_error    text
);

CREATE INDEX outbox_events_pending ON outbox_events (available_at) WHERE status = 'pending';
CREATE INDEX outbox_events_by_job ON outbox_events (job_id);

-- Steps 5–9 in one round trip, race-free. Called as a single autocommit statement, so the
-- advisory locks are held until its implicit transaction commits. Lock order is always
-- client then global, so two callers never deadlock, and a client waiting on its own lock
-- (held by another request of that client, or by the Python fleet) holds up no one else.
-- Each statement of a VOLATILE PL/pgSQL function takes a fresh snapshot under READ COMMITTED,
-- so the counts after the locks see every job committed by the previous holder.
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
    p_lock_timeout_ms bigint
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_queued bigint;
    v_rendering bigint;
    v_active bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    PERFORM pg_advisory_xact_lock(p_client_lock);
    PERFORM pg_advisory_xact_lock(p_global_lock);

    SELECT count(*) FILTER (WHERE status = 'queued'),
           count(*) FILTER (WHERE status IN ('downloading', 'rendering'))
      INTO v_queued, v_rendering
      FROM jobs
     WHERE status IN ('queued', 'downloading', 'rendering');
    IF v_queued >= p_max_queued THEN
        RETURN 'queue_full';
    END IF;
    IF v_rendering >= p_max_rendering THEN
        RETURN 'render_capacity';
    END IF;

    SELECT count(*) INTO v_active
      FROM jobs
     WHERE client_ip = p_client_ip AND status IN ('queued', 'downloading', 'rendering');
    IF v_active >= p_max_active_per_client THEN
        RETURN 'too_many_active_jobs';
    END IF;

    INSERT INTO jobs (id, client_ip, skin, config, replay_key)
    VALUES (p_id, p_client_ip, p_skin, p_config, p_replay_key);
    INSERT INTO outbox_events (job_id, event_type, payload)
    VALUES (p_id, 'render_job_created',
            jsonb_build_object('job_id', p_id, 'replay_key', p_replay_key, 'skin', p_skin,
                               'config', p_config));
    RETURN 'admitted';
END
$$;
