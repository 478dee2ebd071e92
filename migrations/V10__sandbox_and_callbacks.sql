-- Issue 13: sandbox jobs and signed callbacks (DESIGN.md §9).
--
-- A sandbox job (a key `osr_test_…`) is stored final: status 'completed' with the documented
-- sample artifacts, so it is in none of the active-status counts, queues and sweeps that real
-- capacity is measured by. What a client reads of it is derived from its age
-- (domain/sandbox.rs); its key's active count and duplicate check look at its recent sandbox
-- jobs instead (admit_job below, and the occupancy read).
--
-- A job with a callback_url gets a row in job_callbacks for each status change (and a progress
-- update at most every 5 s), numbered per job, written by the same statement that changes the
-- job (the trigger below), so no change is missed whichever code path or release makes it.
-- The dispatcher delivers them in order per job. A table of their own, not outbox_events: an
-- earlier release rolled back to would publish any outbox row to the render queue.
ALTER TABLE jobs
    ADD COLUMN sandbox boolean NOT NULL DEFAULT false,
    ADD COLUMN callback_url text,
    -- The sequence number of the job's latest callback, and when it was queued.
    ADD COLUMN callback_seq integer NOT NULL DEFAULT 0,
    ADD COLUMN callback_at timestamptz;

CREATE TABLE job_callbacks (
    id            bigserial PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    sequence      integer NOT NULL,
    url           text NOT NULL,
    -- The JSON body as it is signed and sent.
    body          jsonb NOT NULL,
    status        text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'dispatched', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    available_at  timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    UNIQUE (job_id, sequence)
);

-- The dispatcher's claim: due pending callbacks (the in-order check uses the unique index).
CREATE INDEX job_callbacks_pending ON job_callbacks (available_at) WHERE status = 'pending';

-- A sandbox key's recent jobs, for its active count and duplicate check.
CREATE INDEX jobs_sandbox_by_client_age ON jobs (client_ip, created_at) WHERE sandbox;

-- The body of a job's callback number `p_sequence`: what changed, as GET /v1/jobs/{id} shows it.
CREATE FUNCTION job_callback_body(
    p_job uuid, p_sequence integer, p_status text, p_progress real, p_error text,
    p_at timestamptz
) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'type', 'job.status',
        'job_id', p_job,
        'sequence', p_sequence,
        'status', p_status,
        'progress', p_progress,
        'error', p_error,
        'occurred_at', to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'links', jsonb_build_object('status', '/v1/jobs/' || p_job)
    ))
$$;

-- Each status change of a job with a callback, and a progress change once 5 s have passed
-- since its last callback (so a worker reporting every second costs the client one POST in 5).
CREATE FUNCTION queue_job_callback() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status
       AND (NEW.progress = OLD.progress OR OLD.callback_at > now() - interval '5 seconds') THEN
        RETURN NEW;
    END IF;
    NEW.callback_seq := OLD.callback_seq + 1;
    NEW.callback_at := now();
    INSERT INTO job_callbacks (job_id, sequence, url, body)
    VALUES (NEW.id, NEW.callback_seq, NEW.callback_url,
            job_callback_body(NEW.id, NEW.callback_seq, NEW.status::text, NEW.progress,
                              NEW.error, now()));
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_queue_callback
    BEFORE UPDATE OF status, progress ON jobs
    FOR EACH ROW
    WHEN (NEW.callback_url IS NOT NULL AND NOT NEW.sandbox)
    EXECUTE FUNCTION queue_job_callback();

-- admit_job as V9 made it, and more optional keys. A caller that sends none of them (the
-- code of an earlier release) admits as before.
-- - sandbox: the job is admitted without the global lock and caps, stored final (see above,
--   with sandbox_video_key and sandbox_thumb_key), and gets no render_job_created event; its
--   client's active jobs are its sandbox jobs younger than sandbox_active_ms.
-- - callback_url, callbacks: the job's callbacks to queue now, an array of
--   {delay_ms, status, progress}: the first status, or a sandbox job's whole schedule.
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
    v_sandbox boolean := coalesce((p ->> 'sandbox')::boolean, false);
    v_sandbox_since timestamptz :=
        now() - coalesce((p ->> 'sandbox_active_ms')::bigint, 0) * interval '1 millisecond';
    v_callbacks jsonb := coalesce(p -> 'callbacks', '[]'::jsonb);
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

    IF v_sandbox THEN
        SELECT (array_agg(id) FILTER (WHERE replay_sha256 = v_hash))[1], count(*)
          INTO existing_job, v_active
          FROM jobs
         WHERE client_ip = v_client AND sandbox AND created_at > v_sandbox_since;
    ELSE
        SELECT id INTO existing_job
          FROM jobs
         WHERE client_ip = v_client AND replay_sha256 = v_hash
           AND status IN ('queued', 'downloading', 'rendering')
         LIMIT 1;
    END IF;
    IF existing_job IS NOT NULL THEN
        verdict := 'duplicate';
        RETURN;
    END IF;

    IF NOT v_sandbox THEN
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
    END IF;
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

    INSERT INTO jobs (id, client_ip, client_addr, skin, config, replay_key, replay_sha256,
                      sandbox, status, progress, video_key, thumb_key,
                      callback_url, callback_seq, callback_at)
    VALUES (v_id, v_client, p ->> 'client_addr', p ->> 'skin', p -> 'config', p ->> 'replay_key',
            v_hash, v_sandbox,
            CASE WHEN v_sandbox THEN 'completed' ELSE 'queued' END::job_status,
            CASE WHEN v_sandbox THEN 100 ELSE 0 END,
            p ->> 'sandbox_video_key', p ->> 'sandbox_thumb_key',
            p ->> 'callback_url', jsonb_array_length(v_callbacks),
            CASE WHEN jsonb_array_length(v_callbacks) > 0 THEN now() END);
    INSERT INTO job_callbacks (job_id, sequence, url, body, available_at)
    SELECT v_id, c.n, p ->> 'callback_url',
           job_callback_body(v_id, c.n::integer, c.step ->> 'status',
                             (c.step ->> 'progress')::real, NULL,
                             now() + (c.step ->> 'delay_ms')::bigint * interval '1 millisecond'),
           now() + (c.step ->> 'delay_ms')::bigint * interval '1 millisecond'
      FROM jsonb_array_elements(v_callbacks) WITH ORDINALITY AS c (step, n)
     WHERE p ->> 'callback_url' IS NOT NULL;
    IF NOT v_sandbox THEN
        INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
        VALUES (v_id, 'render_job_created', p -> 'event_payload', 1,
                now() + (p ->> 'event_lease_ms')::bigint * interval '1 millisecond')
        RETURNING id INTO event_id;
    END IF;
    verdict := 'admitted';
END
$$;
