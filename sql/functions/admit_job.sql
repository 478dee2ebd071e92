-- admit_job: a render's admission (DESIGN.md §2, step 19: the capacity steps 13–15 re-checked
-- under the client's lock, the job and its outbox event inserted) in one round trip, race-free (§5).
-- Returns the verdict, the render_job_created event's id (an admitted real job) and the job
-- that duplicates this one (verdict 'duplicate').
--
-- Locks and snapshots (migrations/V1). Called as a single autocommit statement, so the
-- advisory locks are held until its implicit transaction commits. Lock order is always
-- client then global, so two callers never deadlock, and a client waiting on its own lock
-- (held by another request of that client, or by the Python fleet) holds up no one else.
-- Each statement of a VOLATILE PL/pgSQL function takes a fresh snapshot under READ COMMITTED,
-- so the counts after the locks see every job committed by the previous holder. Every count
-- is read after the global lock, so no concurrent admission can pass the same cap.
--
-- The event (migrations/V2): the caller builds the event payload and publishes that very
-- payload right after commit; the event is inserted as already leased to that fast path
-- (`attempts = 1`, `available_at` one lease ahead), so the sweep leaves it alone while the
-- admitting function publishes it, and delivers it when that publish failed or the function
-- died.
--
-- Duplicates and idempotency (migrations/V4): the duplicate check runs under the client's lock
-- (duplicates are per client, and that lock serializes one client's admissions, also against a
-- Python fleet) and before the global lock, so a duplicate never waits for, or holds up, anyone
-- else's admission. The Idempotency-Key claim is completed in the job's own transaction, before
-- the job is inserted and only if it still is this request's claim: a job with a key exists
-- exactly when its key answers with it.
--
-- The checks, in order, and their verdicts:
-- - 'abandoned': resolve_admission gave this job id up (the request was told 503; V5);
-- - 'duplicate': the client has this replay queued or rendering (a sandbox client: among its
--   sandbox jobs younger than sandbox_active_ms);
-- - 'queue_full', 'anonymous_queue_full', 'render_capacity': the global caps, from job_counts
--   (V11; kept by count_job_changes), not for a sandbox job;
-- - 'too_many_active_jobs': the client's cap; 'too_many_network_jobs': its network's (V11);
--   'too_many_wide_network_jobs': its wide network's (V19);
-- - 'claim_lost': the request's idempotency claim is no longer its own (released, or taken over
--   as stale; V5);
-- - 'admitted'.
--
-- The argument, one jsonb object (V5: a later change is a CREATE OR REPLACE rather than a DROP
-- and a new signature). Built by the Rust side from a typed struct (AdmitArgs in
-- functions/core/src/adapters/postgres/jobs.rs); this function refuses (RAISE EXCEPTION) an
-- argument with a required key missing or null, or with a key it does not know, since a
-- misspelled key would read as NULL and silently skip the check it guards.
-- Required (not null): id, client_ip, client_lock, global_lock, skin, config, replay_key,
--   replay_sha256 (hex), max_queued, max_rendering, max_active_per_client, lock_timeout_ms,
--   event_payload, event_lease_ms.
-- Optional (absent or null: as described). Those a later migration added (V9, V10, V11) are
-- absent from what the code of an earlier release sends, which admits as before:
-- - idem_endpoint, idem_key, idem_token, idem_response: the Idempotency-Key claim to complete
--   (without idem_token there is none);
-- - client_addr (V9): the address a key client's job came from, stored with the job;
-- - sandbox, sandbox_active_ms, sandbox_video_key, sandbox_thumb_key (V10): a sandbox job is
--   admitted without the global lock and caps, stored final (completed, with the sample
--   artifacts), and gets no render_job_created event; its client's active jobs are its sandbox
--   jobs younger than sandbox_active_ms;
-- - callback_url, callbacks (V10): the job's callbacks to queue now, an array of
--   {delay_ms, status, progress}: the first status, or a sandbox job's whole schedule. A step
--   in its previous one's status (progress only) is left out once the client's undelivered
--   callbacks, with the steps kept before it, reach the bound (callback_backlog_full), as a
--   live job's progress update is (queue_job_callback);
-- - client_network (V11): the anonymous client's network, stored with the job;
-- - max_active_per_network (V11): the network's cap on active jobs (checked after the
--   client's), none for a key's job;
-- - max_anonymous_queued (V11): the anonymous clients' share of the queue (checked after the
--   queue), none for a key's job;
-- - replay (V14): what the replay says (domain/replay/info.rs), stored with the job and put in
--   its callbacks;
-- - sandbox_failure (V14): {error, error_code, retryable}: a sandbox job with
--   `sandbox_outcome=failed`, stored failed with this failure (and its failed callback carries
--   it) rather than completed with the sample artifacts.
-- - client_wide_network (V19): the wider block around the anonymous client's network, stored
--   with the job;
-- - max_active_per_wide_network (V19): the wide network's cap on active jobs (checked after the
--   network's), none for a key's job;
-- - client_reference (V24): the client's own label, stored with the job;
-- - render_cost, fair_weight (V18): the job's expected render-seconds and its client's weight.
--   With them the job waits in the queue of record (released_at NULL) with its fair tags:
--   start = max(fair_clock, its fair client's last finish tag in fair_clients), finish = start +
--   render_cost / fair_weight (kept as the client's last finish), where the fair client is an
--   anonymous client's network or the key; its event is held (available_at 'infinity', no attempt) until release_jobs
--   releases it. Without them (the code of an earlier release, after a rollback) the job is
--   released at once and its event leased to the caller's fast path, as before, and every
--   job still held is released with it (that code never calls release_jobs).
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
    v_wide_network text := p ->> 'client_wide_network';
    v_hash bytea := decode(p ->> 'replay_sha256', 'hex');
    v_idem_token uuid := (p ->> 'idem_token')::uuid;
    v_sandbox boolean := coalesce((p ->> 'sandbox')::boolean, false);
    v_sandbox_since timestamptz :=
        now() - coalesce((p ->> 'sandbox_active_ms')::bigint, 0) * interval '1 millisecond';
    v_callbacks jsonb := coalesce(p -> 'callbacks', '[]'::jsonb);
    v_scheduled jsonb;
    v_step jsonb;
    v_failure jsonb := nullif(p -> 'sandbox_failure', 'null'::jsonb);
    v_counts job_counts;
    v_active bigint;
    v_cost real := (p ->> 'render_cost')::real;
    v_weight double precision := coalesce((p ->> 'fair_weight')::double precision, 1);
    v_fair boolean := NOT coalesce((p ->> 'sandbox')::boolean, false)
                      AND (p ->> 'render_cost') IS NOT NULL;
    v_start double precision;
    -- The argument's keys (see above).
    c_required CONSTANT text[] := ARRAY[
        'id', 'client_ip', 'client_lock', 'global_lock', 'skin', 'config', 'replay_key',
        'replay_sha256', 'max_queued', 'max_rendering', 'max_active_per_client',
        'lock_timeout_ms', 'event_payload', 'event_lease_ms'];
    c_optional CONSTANT text[] := ARRAY[
        'idem_endpoint', 'idem_key', 'idem_token', 'idem_response', 'client_addr', 'sandbox',
        'sandbox_active_ms', 'sandbox_video_key', 'sandbox_thumb_key', 'callback_url',
        'callbacks', 'client_network', 'max_active_per_network', 'max_anonymous_queued',
        'replay', 'sandbox_failure', 'render_cost', 'fair_weight', 'client_wide_network',
        'max_active_per_wide_network', 'client_reference'];
    v_wrong text;
BEGIN
    -- The argument first, before any lock (see above).
    IF jsonb_typeof(p) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'admit_job: the argument must be a JSON object, not %',
            coalesce(jsonb_typeof(p), 'NULL');
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_wrong
      FROM unnest(c_required) AS k
     WHERE coalesce(jsonb_typeof(p -> k), 'null') = 'null';
    IF v_wrong IS NOT NULL THEN
        RAISE EXCEPTION 'admit_job: required key(s) missing or null: %', v_wrong;
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_wrong
      FROM jsonb_object_keys(p) AS k
     WHERE k <> ALL (c_required || c_optional);
    IF v_wrong IS NOT NULL THEN
        RAISE EXCEPTION 'admit_job: unknown key(s): % (misspelled?)', v_wrong;
    END IF;

    -- Lock order, snapshots and the capacity checks: see above.
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

        -- An earlier release's caller (a rollback) has no release_jobs: its admission hands
        -- every held job to the render queue, as that release would have at their admission,
        -- so no job admitted by this release waits forever (at most MAX_QUEUED rows, once).
        -- Before this admission's insert takes job_counts' row: jobs' rows first, as every
        -- statement that changes a job.
        IF (p ->> 'render_cost') IS NULL THEN
            UPDATE jobs SET released_at = now()
             WHERE status = 'queued' AND released_at IS NULL;
            UPDATE outbox_events SET available_at = now()
             WHERE status = 'pending' AND available_at = 'infinity';
        END IF;

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
    IF NOT v_sandbox AND v_wide_network IS NOT NULL AND (
        SELECT count(*) FROM jobs
         WHERE client_wide_network = v_wide_network AND client_wide_network IS NOT NULL
           AND status IN ('queued', 'downloading', 'rendering')
    ) >= (p ->> 'max_active_per_wide_network')::bigint THEN
        verdict := 'too_many_wide_network_jobs';
        RETURN;
    END IF;

    IF v_fair THEN
        IF v_cost <= 0 OR v_weight <= 0 THEN
            RAISE EXCEPTION 'admit_job: render_cost and fair_weight must be positive';
        END IF;
        -- Under the global lock, which release_jobs takes too: the clock cannot move meanwhile.
        SELECT greatest(c.virtual_time, (SELECT f.finish FROM fair_clients f
                                          WHERE f.client = coalesce(v_network, v_client)))
          INTO v_start
          FROM fair_clock c;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'fair_clock has no row';
        END IF;
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

    -- The callbacks' bound (see above), before the job records how many it queued.
    IF p ->> 'callback_url' IS NOT NULL THEN
        v_scheduled := v_callbacks;
        v_callbacks := '[]'::jsonb;
        FOR v_step IN SELECT c.step FROM jsonb_array_elements(v_scheduled)
                                         WITH ORDINALITY AS c (step, n) ORDER BY c.n LOOP
            CONTINUE WHEN v_step ->> 'status' = v_callbacks -> -1 ->> 'status'
                      AND callback_backlog_full(v_client, jsonb_array_length(v_callbacks));
            v_callbacks := v_callbacks || jsonb_build_array(v_step);
        END LOOP;
    END IF;

    INSERT INTO jobs (id, client_ip, client_addr, client_network, client_wide_network, skin,
                      config, replay_key, replay_sha256, replay, sandbox, status, progress,
                      video_key, thumb_key,
                      error, error_code, error_retryable,
                      callback_url, callback_seq, callback_at,
                      render_cost, fair_start, fair_finish, released_at, client_reference)
    VALUES (v_id, v_client, p ->> 'client_addr', v_network, v_wide_network, p ->> 'skin',
            p -> 'config', p ->> 'replay_key', v_hash, nullif(p -> 'replay', 'null'::jsonb),
            v_sandbox,
            CASE WHEN NOT v_sandbox THEN 'queued'
                 WHEN v_failure IS NOT NULL THEN 'failed'
                 ELSE 'completed' END::job_status,
            CASE WHEN v_sandbox AND v_failure IS NULL THEN 100 ELSE 0 END,
            p ->> 'sandbox_video_key', p ->> 'sandbox_thumb_key',
            v_failure ->> 'error', v_failure ->> 'error_code',
            (v_failure ->> 'retryable')::boolean,
            p ->> 'callback_url', jsonb_array_length(v_callbacks),
            CASE WHEN jsonb_array_length(v_callbacks) > 0 THEN now() END,
            v_cost, v_start, v_start + v_cost / v_weight,
            CASE WHEN NOT v_sandbox AND NOT v_fair THEN now() END, p ->> 'client_reference');
    INSERT INTO job_callbacks (job_id, sequence, url, body, available_at)
    SELECT v_id, c.n, p ->> 'callback_url',
           job_callback_body(v_id, c.n::integer, c.step ->> 'status',
                             (c.step ->> 'progress')::real, f.failure ->> 'error',
                             now() + (c.step ->> 'delay_ms')::bigint * interval '1 millisecond',
                             nullif(p -> 'replay', 'null'::jsonb), f.failure ->> 'error_code',
                             (f.failure ->> 'retryable')::boolean,
                             p ->> 'sandbox_thumb_key' IS NOT NULL),
           now() + (c.step ->> 'delay_ms')::bigint * interval '1 millisecond'
      FROM jsonb_array_elements(v_callbacks) WITH ORDINALITY AS c (step, n)
           CROSS JOIN LATERAL (SELECT CASE WHEN c.step ->> 'status' = 'failed'
                                           THEN v_failure END) AS f (failure)
     WHERE p ->> 'callback_url' IS NOT NULL;
    IF v_fair THEN
        INSERT INTO fair_clients (client, finish)
        VALUES (coalesce(v_network, v_client), v_start + v_cost / v_weight)
        ON CONFLICT (client) DO UPDATE SET finish = excluded.finish;
    END IF;
    IF NOT v_sandbox THEN
        -- Held for release_jobs, or (an earlier release's caller) leased to its fast path.
        INSERT INTO outbox_events (job_id, event_type, payload, attempts, available_at)
        VALUES (v_id, 'render_job_created', p -> 'event_payload',
                CASE WHEN v_fair THEN 0 ELSE 1 END,
                CASE WHEN v_fair THEN 'infinity'::timestamptz
                     ELSE now() + (p ->> 'event_lease_ms')::bigint * interval '1 millisecond' END)
        RETURNING id INTO event_id;
    END IF;
    verdict := 'admitted';
END
$$;
