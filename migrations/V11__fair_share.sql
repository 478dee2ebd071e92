-- Issue 19: fair share when identities are cheap (DESIGN.md §3, "Fairness").
--
-- 1. An anonymous job records its client's network (IPv4 /24, IPv6 /48 by default), so one
--    actor with many addresses of one allocation is capped as one network.
-- 2. The capacity counts every admission reads (queued, rendering, and queued of anonymous
--    clients) are kept in one row, changed by the same statement that changes a job, so
--    reading them costs the same with 50,000 queued jobs as with none.
-- 3. Sandbox jobs (stored completed) leave the index the hourly throughput count scans.

-- The statements below change jobs' columns, indexes and triggers and seed the counts from the
-- rows: nothing may read or change a job meanwhile. The strongest lock first, as ADD COLUMN
-- needs it anyway: a weaker one, upgraded later, would deadlock with an older release's
-- admission that had read jobs and then waited to insert (its request failing).
LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;

ALTER TABLE jobs ADD COLUMN client_network text;

-- An anonymous network's active jobs, for its cap (at most MAX_ACTIVE_PER_NETWORK rows each).
CREATE INDEX jobs_active_by_network ON jobs (client_network)
    WHERE status IN ('queued', 'downloading', 'rendering') AND client_network IS NOT NULL;

-- The hourly throughput count (estimates, and each queued job's `estimated_start`) reads only
-- real renders: a sandbox key's thousands of simulated jobs are not in its index.
DROP INDEX jobs_completed_by_update;
CREATE INDEX jobs_rendered_by_update ON jobs (updated_at)
    WHERE status = 'completed' AND NOT sandbox;

-- One row: the active jobs by what the global caps compare. Anonymous is every client that is
-- not an API key's (`key:<uuid>`), the Python fleet's jobs included.
CREATE TABLE job_counts (
    one              boolean PRIMARY KEY DEFAULT true CHECK (one),
    queued           bigint NOT NULL,
    rendering        bigint NOT NULL,
    anonymous_queued bigint NOT NULL
);

INSERT INTO job_counts (queued, rendering, anonymous_queued)
SELECT count(*) FILTER (WHERE status = 'queued'),
       count(*) FILTER (WHERE status IN ('downloading', 'rendering')),
       count(*) FILTER (WHERE status = 'queued' AND client_ip NOT LIKE 'key:%')
  FROM jobs;

-- A statement's net change of the counts, from its transition tables (rows before and after),
-- applied once at the statement's end: one row update however many jobs it changed, none when
-- it changed no count (a progress report). Taken last in the statement, after its row locks,
-- so two statements never wait on each other in opposite orders.
CREATE FUNCTION count_job_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d_queued bigint := 0;
    d_rendering bigint := 0;
    d_anonymous bigint := 0;
    q bigint;
    r bigint;
    a bigint;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT count(*) FILTER (WHERE status = 'queued'),
               count(*) FILTER (WHERE status IN ('downloading', 'rendering')),
               count(*) FILTER (WHERE status = 'queued' AND client_ip NOT LIKE 'key:%')
          INTO q, r, a FROM counted_new;
        d_queued := q; d_rendering := r; d_anonymous := a;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT count(*) FILTER (WHERE status = 'queued'),
               count(*) FILTER (WHERE status IN ('downloading', 'rendering')),
               count(*) FILTER (WHERE status = 'queued' AND client_ip NOT LIKE 'key:%')
          INTO q, r, a FROM counted_old;
        d_queued := d_queued - q; d_rendering := d_rendering - r; d_anonymous := d_anonymous - a;
    END IF;
    IF d_queued <> 0 OR d_rendering <> 0 OR d_anonymous <> 0 THEN
        UPDATE job_counts
           SET queued = queued + d_queued,
               rendering = rendering + d_rendering,
               anonymous_queued = anonymous_queued + d_anonymous;
        -- Without its row the caps would go unchecked: the change fails instead.
        IF NOT FOUND THEN
            RAISE EXCEPTION 'job_counts has no row';
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- A trigger with transition tables serves one event.
CREATE TRIGGER jobs_count_inserts AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS counted_new
    FOR EACH STATEMENT EXECUTE FUNCTION count_job_changes();
CREATE TRIGGER jobs_count_updates AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS counted_old NEW TABLE AS counted_new
    FOR EACH STATEMENT EXECUTE FUNCTION count_job_changes();
CREATE TRIGGER jobs_count_deletes AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS counted_old
    FOR EACH STATEMENT EXECUTE FUNCTION count_job_changes();

-- TRUNCATE has no transition table: the table is empty after it.
CREATE FUNCTION reset_job_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_counts SET queued = 0, rendering = 0, anonymous_queued = 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_count_truncates AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION reset_job_counts();

-- admit_job as V10 made it, with the counts read from job_counts and more optional keys. A
-- caller that sends none of them (the code of an earlier release) admits as before.
-- - client_network: the anonymous client's network, stored with the job.
-- - max_active_per_network: the network's cap on active jobs (checked after the client's).
-- - max_anonymous_queued: the anonymous clients' share of the queue (checked after the queue).
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
    v_network text := p ->> 'client_network';
    v_hash bytea := decode(p ->> 'replay_sha256', 'hex');
    v_idem_token uuid := (p ->> 'idem_token')::uuid;
    v_sandbox boolean := coalesce((p ->> 'sandbox')::boolean, false);
    v_sandbox_since timestamptz :=
        now() - coalesce((p ->> 'sandbox_active_ms')::bigint, 0) * interval '1 millisecond';
    v_callbacks jsonb := coalesce(p -> 'callbacks', '[]'::jsonb);
    v_counts job_counts;
    v_active bigint;
BEGIN
    -- Lock order, snapshots and the capacity checks are as in V1: see there. Every count below
    -- is read after the global lock, so no concurrent admission can pass the same cap.
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

        SELECT * INTO v_counts FROM job_counts;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'job_counts has no row';
        END IF;
        IF v_counts.queued >= (p ->> 'max_queued')::bigint THEN
            verdict := 'queue_full';
            RETURN;
        END IF;
        IF v_counts.anonymous_queued >= (p ->> 'max_anonymous_queued')::bigint THEN
            verdict := 'anonymous_queue_full';
            RETURN;
        END IF;
        IF v_counts.rendering >= (p ->> 'max_rendering')::bigint THEN
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
    IF NOT v_sandbox AND v_network IS NOT NULL AND (
        SELECT count(*) FROM jobs
         WHERE client_network = v_network AND client_network IS NOT NULL
           AND status IN ('queued', 'downloading', 'rendering')
    ) >= (p ->> 'max_active_per_network')::bigint THEN
        verdict := 'too_many_network_jobs';
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

    INSERT INTO jobs (id, client_ip, client_addr, client_network, skin, config, replay_key,
                      replay_sha256, sandbox, status, progress, video_key, thumb_key,
                      callback_url, callback_seq, callback_at)
    VALUES (v_id, v_client, p ->> 'client_addr', v_network, p ->> 'skin', p -> 'config',
            p ->> 'replay_key', v_hash, v_sandbox,
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
