-- The schema as migrations/V*.sql and sql/functions/*.sql leave it (refinery's own history table
-- left out): a snapshot for readers, checked by functions/migrate/tests/schema.rs. Do not edit:
-- change a migration or a function's file, then run infra/schema-snapshot
-- (UPDATE_SCHEMA=1 cargo test -p osurender-migrate --test schema).

--
-- Name: job_status; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.job_status AS ENUM (
    'queued',
    'downloading',
    'rendering',
    'completed',
    'failed',
    'expired'
);

--
-- Name: admit_job(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.admit_job(p jsonb, OUT verdict text, OUT event_id bigint, OUT existing_job uuid) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: admit_job(uuid, text, bigint, bigint, text, jsonb, text, bigint, bigint, bigint, bigint, jsonb, bigint, bytea, text, text, uuid, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.admit_job(p_id uuid, p_client_ip text, p_client_lock bigint, p_global_lock bigint, p_skin text, p_config jsonb, p_replay_key text, p_max_queued bigint, p_max_rendering bigint, p_max_active_per_client bigint, p_lock_timeout_ms bigint, p_event_payload jsonb, p_event_lease_ms bigint, p_replay_sha256 bytea, p_idem_endpoint text, p_idem_key text, p_idem_token uuid, p_idem_response jsonb, OUT verdict text, OUT event_id bigint, OUT existing_job uuid) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: callback_backlog_full(text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callback_backlog_full(p_client text, p_queuing bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT count(*) + p_queuing >= (SELECT max_pending_per_key FROM callback_dispatch)
      FROM (SELECT FROM job_callbacks
             WHERE client = p_client AND status = 'pending'
             LIMIT (SELECT max_pending_per_key FROM callback_dispatch)) AS undelivered
$$;

--
-- Name: count_job_changes(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.count_job_changes() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: count_job_event(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.count_job_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status OR NEW.progress IS DISTINCT FROM OLD.progress THEN
        NEW.event_seq := OLD.event_seq + 1;
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: farm_state(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.farm_state() RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
SELECT jsonb_build_object(
    'in_flight',
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'cost', f.render_cost,
                'elapsed_secs',
                extract(epoch FROM now() - coalesce(f.started_at, f.released_at, f.updated_at))
                    ::float8)), '[]'::jsonb)
       FROM jobs f WHERE f.status IN ('downloading', 'rendering')),
    'waiting',
    (SELECT count(*) FROM jobs w WHERE w.status = 'queued' AND w.released_at IS NOT NULL),
    'rendered',
    (SELECT jsonb_build_object(
                'cost_secs', coalesce(sum(r.render_cost), 0)::float8,
                'busy_secs', coalesce(sum(extract(epoch FROM r.updated_at - r.started_at)), 0)::float8,
                'jobs', count(*))
       FROM jobs r
      WHERE r.status = 'completed' AND NOT r.sandbox AND r.updated_at > now() - interval '1 hour'
        AND r.started_at IS NOT NULL AND r.render_cost IS NOT NULL))
$$;

--
-- Name: job_callback_body(uuid, integer, text, real, text, timestamp with time zone, jsonb, text, boolean, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_callback_body(p_job uuid, p_sequence integer, p_status text, p_progress real, p_error text, p_at timestamp with time zone, p_replay jsonb, p_error_code text, p_retryable boolean, p_has_thumbnail boolean) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'type', 'job.status',
        'job_id', p_job,
        'sequence', p_sequence,
        'status', p_status,
        'progress', p_progress,
        'error', p_error,
        'error_code', p_error_code,
        'retryable', p_retryable,
        'occurred_at', to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'links', jsonb_build_object(
            'status', '/v1/jobs/' || p_job,
            'video', CASE WHEN p_status = 'completed' THEN '/v1/jobs/' || p_job || '/video' END,
            'thumbnail', CASE WHEN p_status = 'completed' AND p_has_thumbnail
                              THEN '/v1/jobs/' || p_job || '/thumbnail' END)
    )) || CASE WHEN p_replay IS NULL THEN '{}'::jsonb
               ELSE jsonb_build_object('replay', p_replay) END
$$;

--
-- Name: job_callback_client(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_callback_client() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.client IS NULL THEN
        SELECT client_ip INTO NEW.client FROM jobs WHERE id = NEW.job_id;
    END IF;
    NEW.available_at := greatest(NEW.available_at,
                                 (SELECT max(available_at) FROM job_callbacks
                                   WHERE job_id = NEW.job_id AND status = 'pending'));
    RETURN NEW;
END
$$;

--
-- Name: queue_job_callback(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.queue_job_callback() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status = OLD.status
       AND (NEW.progress = OLD.progress OR OLD.callback_at > now() - interval '5 seconds') THEN
        RETURN NEW;
    END IF;
    IF NEW.status = OLD.status AND callback_backlog_full(NEW.client_ip, 0) THEN
        RETURN NEW;
    END IF;
    NEW.callback_seq := OLD.callback_seq + 1;
    NEW.callback_at := now();
    INSERT INTO job_callbacks (job_id, sequence, url, body, client)
    VALUES (NEW.id, NEW.callback_seq, NEW.callback_url,
            job_callback_body(NEW.id, NEW.callback_seq, NEW.status::text, NEW.progress,
                              NEW.error, now(), NEW.replay, NEW.error_code,
                              NEW.error_retryable, NEW.thumb_key IS NOT NULL),
            NEW.client_ip);
    RETURN NEW;
END
$$;

--
-- Name: queue_job_push(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.queue_job_push() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM event_watches
         WHERE topic IN ('job#' || NEW.id,
                         CASE WHEN NEW.client_ip LIKE 'key:%' THEN 'key#' || NEW.client_ip END)
           AND until > now()
    ) THEN
        RETURN NULL;
    END IF;
    INSERT INTO job_pushes (job_id, client, sequence, due_at)
    VALUES (NEW.id, NEW.client_ip, NEW.event_seq, now())
    ON CONFLICT (job_id) DO UPDATE
       SET sequence = greatest(job_pushes.sequence, EXCLUDED.sequence),
           due_at = now(),
           attempts = 0,
           leased_until = NULL;
    RETURN NULL;
END
$$;

--
-- Name: queue_place(uuid, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.queue_place(p_job uuid, p_start double precision) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    c_listed CONSTANT integer := 64;
    c_after_all CONSTANT uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
    v_id uuid := coalesce(p_job, c_after_all);
    v_start double precision := p_start;
    v_released timestamptz;
    v_cost real;
    v_waiting real[];
    v_listed real[];
    v_rest double precision := 0;
    v_rest_count bigint := 0;
BEGIN
    IF p_job IS NOT NULL THEN
        SELECT j.released_at, j.fair_start, j.render_cost INTO v_released, v_start, v_cost
          FROM jobs j WHERE j.id = p_job AND j.status = 'queued';
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    SELECT array_agg(w.render_cost ORDER BY w.released_at, w.id) INTO v_waiting
      FROM jobs w
     WHERE w.status = 'queued' AND w.released_at IS NOT NULL
       AND (v_released IS NULL OR (w.released_at, w.id) < (v_released, v_id));
    IF v_released IS NULL THEN
        SELECT array_agg(a.render_cost ORDER BY a.fair_start, a.id) INTO v_listed
          FROM (SELECT f.render_cost, f.fair_start, f.id FROM jobs f
                 WHERE f.status = 'queued' AND f.released_at IS NULL
                   AND (f.fair_start, f.id) < (v_start, v_id)
                 ORDER BY f.fair_start, f.id
                 LIMIT c_listed) a;
        SELECT coalesce(sum(b.render_cost), 0), count(*) INTO v_rest, v_rest_count
          FROM (SELECT f.render_cost FROM jobs f
                 WHERE f.status = 'queued' AND f.released_at IS NULL
                   AND (f.fair_start, f.id) < (v_start, v_id)
                 ORDER BY f.fair_start, f.id
                OFFSET c_listed) b;
    END IF;
    RETURN jsonb_build_object(
        'position', coalesce(cardinality(v_waiting), 0) + coalesce(cardinality(v_listed), 0)
                    + v_rest_count + 1,
        'ahead', to_jsonb(coalesce(v_waiting, '{}'::real[]) || coalesce(v_listed, '{}'::real[])),
        'rest', v_rest,
        'cost', v_cost);
END
$$;

--
-- Name: release_jobs(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.release_jobs(p jsonb) RETURNS TABLE(event_id bigint, job_id uuid, payload jsonb, attempts integer, fair_client text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    c_required CONSTANT text[] := ARRAY[
        'global_lock', 'lock_timeout_ms', 'render_slots', 'release_ahead', 'event_lease_ms'];
    v_wrong text;
    v_room bigint;
BEGIN
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_wrong
      FROM unnest(c_required) AS k
     WHERE coalesce(jsonb_typeof(p -> k), 'null') <> 'number';
    IF v_wrong IS NOT NULL THEN
        RAISE EXCEPTION 'release_jobs: required number(s) missing: %', v_wrong;
    END IF;

    IF (p ->> 'after_admission_of') IS NOT NULL AND NOT EXISTS (
        SELECT FROM jobs WHERE id = (p ->> 'after_admission_of')::uuid
    ) THEN
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', (p ->> 'lock_timeout_ms') || 'ms', true);
    PERFORM pg_advisory_xact_lock((p ->> 'global_lock')::bigint);

    SELECT (p ->> 'render_slots')::bigint + (p ->> 'release_ahead')::bigint - c.rendering
           - (SELECT count(*) FROM jobs w WHERE w.status = 'queued' AND w.released_at IS NOT NULL)
      INTO v_room
      FROM job_counts c;
    IF coalesce(v_room, 0) <= 0 THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH picked AS (
        SELECT j.id, j.fair_start FROM jobs j
         WHERE j.status = 'queued' AND j.released_at IS NULL
         ORDER BY j.fair_start, j.id
         LIMIT v_room
           FOR UPDATE SKIP LOCKED
    ), released AS (
        UPDATE jobs j SET released_at = now()
          FROM picked
         WHERE j.id = picked.id
        RETURNING j.id, j.fair_start, coalesce(j.client_network, j.client_ip) AS fair_client
    ), clock AS (
        UPDATE fair_clock
           SET virtual_time = greatest(virtual_time, (SELECT max(r.fair_start) FROM released r))
         WHERE EXISTS (SELECT FROM released)
    )
    UPDATE outbox_events o
       SET available_at = now() + (p ->> 'event_lease_ms')::bigint * interval '1 millisecond',
           attempts = o.attempts + 1
      FROM released r
     WHERE o.job_id = r.id AND o.event_type = 'render_job_created' AND o.status = 'pending'
    RETURNING o.id, o.job_id, o.payload, o.attempts, r.fair_client;
END
$$;

--
-- Name: reset_job_counts(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reset_job_counts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE job_counts SET queued = 0, rendering = 0, anonymous_queued = 0;
    RETURN NULL;
END
$$;

--
-- Name: resolve_admission(uuid, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.resolve_admission(p_id uuid, p_client_lock bigint, p_lock_timeout_ms bigint) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: admission_fences; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.admission_fences (
    job_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    id uuid NOT NULL,
    name text NOT NULL,
    key_hash bytea NOT NULL,
    kind text NOT NULL,
    render_limit_requests integer NOT NULL,
    render_limit_period_secs bigint NOT NULL,
    max_active integer NOT NULL,
    signing_secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    max_resolution text,
    denied_options text[] DEFAULT '{}'::text[] NOT NULL,
    max_replay_length_secs integer,
    weight integer DEFAULT 1 NOT NULL,
    CONSTRAINT api_keys_denied_options_check CHECK ((denied_options <@ ARRAY['motion_blur'::text, 'storyboard'::text, 'video'::text, 'skin'::text, 'motion_blur_960fps'::text, 'load_storyboard'::text, 'load_video'::text, 'show_scoreboard'::text, 'show_avatars_on_scoreboard'::text])),
    CONSTRAINT api_keys_key_hash_check CHECK ((octet_length(key_hash) = 32)),
    CONSTRAINT api_keys_kind_check CHECK ((kind = ANY (ARRAY['live'::text, 'sandbox'::text]))),
    CONSTRAINT api_keys_max_active_check CHECK ((max_active > 0)),
    CONSTRAINT api_keys_max_replay_length_secs_check CHECK (((max_replay_length_secs >= 1) AND (max_replay_length_secs <= 86400))),
    CONSTRAINT api_keys_max_resolution_check CHECK ((max_resolution = ANY (ARRAY['720p'::text, '1080p'::text, '1440p'::text, '4k'::text]))),
    CONSTRAINT api_keys_name_check CHECK (((char_length(name) >= 1) AND (char_length(name) <= 100))),
    CONSTRAINT api_keys_render_limit_period_secs_check CHECK ((render_limit_period_secs > 0)),
    CONSTRAINT api_keys_render_limit_requests_check CHECK ((render_limit_requests > 0)),
    CONSTRAINT api_keys_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
);

--
-- Name: bans; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.bans (
    id bigint NOT NULL,
    kind text NOT NULL,
    address cidr,
    key_id uuid,
    player text,
    reason text,
    until timestamp with time zone DEFAULT 'infinity'::timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT bans_check CHECK (((kind = 'ip'::text) = (address IS NOT NULL))),
    CONSTRAINT bans_check1 CHECK (((kind = 'key'::text) = (key_id IS NOT NULL))),
    CONSTRAINT bans_kind_check CHECK ((kind = ANY (ARRAY['ip'::text, 'key'::text, 'player'::text]))),
    CONSTRAINT bans_player_check CHECK ((((kind = 'player'::text) = (player IS NOT NULL)) AND ((char_length(player) >= 1) AND (char_length(player) <= 64)))),
    CONSTRAINT bans_reason_check CHECK (((char_length(reason) >= 1) AND (char_length(reason) <= 500)))
);

--
-- Name: bans_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.bans ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.bans_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: callback_dispatch; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callback_dispatch (
    only_row boolean DEFAULT true NOT NULL,
    last_client text DEFAULT ''::text NOT NULL,
    max_pending_per_key bigint DEFAULT 1000 NOT NULL,
    CONSTRAINT callback_dispatch_max_pending_per_key_check CHECK ((max_pending_per_key > 0)),
    CONSTRAINT callback_dispatch_only_row_check CHECK (only_row)
);

--
-- Name: event_watches; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_watches (
    topic text NOT NULL,
    until timestamp with time zone NOT NULL
);

--
-- Name: fair_clients; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fair_clients (
    client text NOT NULL,
    finish double precision NOT NULL
);

--
-- Name: fair_clock; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fair_clock (
    only_row boolean DEFAULT true NOT NULL,
    virtual_time double precision DEFAULT 0 NOT NULL,
    CONSTRAINT fair_clock_only_row_check CHECK (only_row)
);

--
-- Name: idempotency_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.idempotency_keys (
    client_ip text NOT NULL,
    endpoint text NOT NULL,
    key text NOT NULL,
    request_hash bytea NOT NULL,
    token uuid NOT NULL,
    status text DEFAULT 'in_progress'::text NOT NULL,
    response jsonb,
    job_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT idempotency_keys_status_check CHECK ((status = ANY (ARRAY['in_progress'::text, 'completed'::text])))
);

--
-- Name: intake_pause; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.intake_pause (
    one boolean DEFAULT true NOT NULL,
    anonymous_only boolean NOT NULL,
    reason text,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT intake_pause_one_check CHECK (one),
    CONSTRAINT intake_pause_reason_check CHECK (((char_length(reason) >= 1) AND (char_length(reason) <= 500)))
);

--
-- Name: job_callbacks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_callbacks (
    id bigint NOT NULL,
    job_id uuid NOT NULL,
    sequence integer NOT NULL,
    url text NOT NULL,
    body jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    available_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatched_at timestamp with time zone,
    client text,
    CONSTRAINT job_callbacks_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'dispatched'::text, 'failed'::text])))
);

--
-- Name: job_callbacks_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.job_callbacks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: job_callbacks_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.job_callbacks_id_seq OWNED BY public.job_callbacks.id;

--
-- Name: job_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_counts (
    one boolean DEFAULT true NOT NULL,
    queued bigint NOT NULL,
    rendering bigint NOT NULL,
    anonymous_queued bigint NOT NULL,
    CONSTRAINT job_counts_one_check CHECK (one)
);

--
-- Name: job_pushes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.job_pushes (
    job_id uuid NOT NULL,
    client text NOT NULL,
    sequence bigint NOT NULL,
    due_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    leased_until timestamp with time zone
);

--
-- Name: jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.jobs (
    id uuid NOT NULL,
    status public.job_status DEFAULT 'queued'::public.job_status NOT NULL,
    client_ip text NOT NULL,
    skin text NOT NULL,
    config jsonb NOT NULL,
    replay_key text NOT NULL,
    progress real DEFAULT 0 NOT NULL,
    error text,
    video_key text,
    thumb_key text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    deadline_at timestamp with time zone,
    replay_sha256 bytea,
    client_addr text,
    sandbox boolean DEFAULT false NOT NULL,
    callback_url text,
    callback_seq integer DEFAULT 0 NOT NULL,
    callback_at timestamp with time zone,
    client_network text,
    replay jsonb,
    error_code text,
    error_retryable boolean,
    render_cost real,
    fair_start double precision,
    fair_finish double precision,
    released_at timestamp with time zone,
    started_at timestamp with time zone,
    client_wide_network text,
    event_seq bigint DEFAULT 0 NOT NULL,
    client_reference text,
    CONSTRAINT jobs_client_reference_check CHECK (((char_length(client_reference) >= 1) AND (char_length(client_reference) <= 128))),
    CONSTRAINT jobs_progress_check CHECK (((progress >= (0)::double precision) AND (progress <= (100)::double precision)))
);

--
-- Name: outbox_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.outbox_events (
    id bigint NOT NULL,
    job_id uuid NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    available_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatched_at timestamp with time zone,
    last_error text,
    CONSTRAINT outbox_events_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'dispatched'::text, 'failed'::text])))
);

--
-- Name: outbox_events_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.outbox_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: outbox_events_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.outbox_events_id_seq OWNED BY public.outbox_events.id;

--
-- Name: skin_ingests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.skin_ingests (
    key text NOT NULL,
    etag text NOT NULL,
    claim uuid,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone
);

--
-- Name: skin_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.skin_reservations (
    folded text NOT NULL,
    name text NOT NULL,
    reserved_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT skin_reservations_check CHECK ((folded = lower(name))),
    CONSTRAINT skin_reservations_name_check CHECK ((name ~ '^[A-Za-z0-9_ -]{1,128}$'::text))
);

--
-- Name: skins; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.skins (
    name text NOT NULL,
    claim uuid NOT NULL,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL,
    stored_at timestamp with time zone,
    folded text GENERATED ALWAYS AS (lower(btrim(name, ' '::text))) STORED,
    shadowed boolean DEFAULT false NOT NULL,
    removed_at timestamp with time zone,
    CONSTRAINT skins_name_check CHECK ((name ~ '^[A-Za-z0-9_ -]{1,128}$'::text))
);

--
-- Name: webhook_nonces; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_nonces (
    nonce text NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: job_callbacks id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_callbacks ALTER COLUMN id SET DEFAULT nextval('public.job_callbacks_id_seq'::regclass);

--
-- Name: outbox_events id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox_events ALTER COLUMN id SET DEFAULT nextval('public.outbox_events_id_seq'::regclass);

--
-- Name: admission_fences admission_fences_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.admission_fences
    ADD CONSTRAINT admission_fences_pkey PRIMARY KEY (job_id);

--
-- Name: api_keys api_keys_key_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash);

--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (id);

--
-- Name: bans bans_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.bans
    ADD CONSTRAINT bans_pkey PRIMARY KEY (id);

--
-- Name: callback_dispatch callback_dispatch_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callback_dispatch
    ADD CONSTRAINT callback_dispatch_pkey PRIMARY KEY (only_row);

--
-- Name: event_watches event_watches_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_watches
    ADD CONSTRAINT event_watches_pkey PRIMARY KEY (topic);

--
-- Name: fair_clients fair_clients_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fair_clients
    ADD CONSTRAINT fair_clients_pkey PRIMARY KEY (client);

--
-- Name: fair_clock fair_clock_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fair_clock
    ADD CONSTRAINT fair_clock_pkey PRIMARY KEY (only_row);

--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (client_ip, endpoint, key);

--
-- Name: intake_pause intake_pause_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.intake_pause
    ADD CONSTRAINT intake_pause_pkey PRIMARY KEY (one);

--
-- Name: job_callbacks job_callbacks_job_id_sequence_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_callbacks
    ADD CONSTRAINT job_callbacks_job_id_sequence_key UNIQUE (job_id, sequence);

--
-- Name: job_callbacks job_callbacks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_callbacks
    ADD CONSTRAINT job_callbacks_pkey PRIMARY KEY (id);

--
-- Name: job_counts job_counts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_counts
    ADD CONSTRAINT job_counts_pkey PRIMARY KEY (one);

--
-- Name: job_pushes job_pushes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_pushes
    ADD CONSTRAINT job_pushes_pkey PRIMARY KEY (job_id);

--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

--
-- Name: outbox_events outbox_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox_events
    ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (id);

--
-- Name: skin_ingests skin_ingests_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.skin_ingests
    ADD CONSTRAINT skin_ingests_pkey PRIMARY KEY (key);

--
-- Name: skin_reservations skin_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.skin_reservations
    ADD CONSTRAINT skin_reservations_pkey PRIMARY KEY (folded);

--
-- Name: skins skins_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.skins
    ADD CONSTRAINT skins_pkey PRIMARY KEY (name);

--
-- Name: webhook_nonces webhook_nonces_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_nonces
    ADD CONSTRAINT webhook_nonces_pkey PRIMARY KEY (nonce);

--
-- Name: admission_fences_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX admission_fences_by_age ON public.admission_fences USING btree (created_at);

--
-- Name: api_keys_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX api_keys_by_age ON public.api_keys USING btree (created_at DESC, id);

--
-- Name: api_keys_by_client; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX api_keys_by_client ON public.api_keys USING btree ((('key:'::text || (id)::text)));

--
-- Name: api_keys_live; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX api_keys_live ON public.api_keys USING btree (key_hash) WHERE (revoked_at IS NULL);

--
-- Name: bans_in_force; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX bans_in_force ON public.bans USING btree (until);

--
-- Name: event_watches_until; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX event_watches_until ON public.event_watches USING btree (until);

--
-- Name: fair_clients_by_finish; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX fair_clients_by_finish ON public.fair_clients USING btree (finish);

--
-- Name: idempotency_keys_by_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idempotency_keys_by_expiry ON public.idempotency_keys USING btree (expires_at);

--
-- Name: job_callbacks_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_callbacks_pending ON public.job_callbacks USING btree (available_at) WHERE (status = 'pending'::text);

--
-- Name: job_callbacks_pending_by_client; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_callbacks_pending_by_client ON public.job_callbacks USING btree (client, available_at, id) WHERE (status = 'pending'::text);

--
-- Name: job_callbacks_pending_by_job; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_callbacks_pending_by_job ON public.job_callbacks USING btree (job_id, sequence) WHERE (status = 'pending'::text);

--
-- Name: job_pushes_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX job_pushes_due ON public.job_pushes USING btree (due_at);

--
-- Name: jobs_active_by_client; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_active_by_client ON public.jobs USING btree (client_ip) WHERE (status = ANY (ARRAY['queued'::public.job_status, 'downloading'::public.job_status, 'rendering'::public.job_status]));

--
-- Name: jobs_active_by_network; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_active_by_network ON public.jobs USING btree (client_network) WHERE ((status = ANY (ARRAY['queued'::public.job_status, 'downloading'::public.job_status, 'rendering'::public.job_status])) AND (client_network IS NOT NULL));

--
-- Name: jobs_active_by_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_active_by_status ON public.jobs USING btree (status) WHERE (status = ANY (ARRAY['queued'::public.job_status, 'downloading'::public.job_status, 'rendering'::public.job_status]));

--
-- Name: jobs_active_by_wide_network; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_active_by_wide_network ON public.jobs USING btree (client_wide_network) WHERE ((status = ANY (ARRAY['queued'::public.job_status, 'downloading'::public.job_status, 'rendering'::public.job_status])) AND (client_wide_network IS NOT NULL));

--
-- Name: jobs_active_replay; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX jobs_active_replay ON public.jobs USING btree (client_ip, replay_sha256) WHERE ((status = ANY (ARRAY['queued'::public.job_status, 'downloading'::public.job_status, 'rendering'::public.job_status])) AND (replay_sha256 IS NOT NULL));

--
-- Name: jobs_by_client_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_by_client_age ON public.jobs USING btree (client_ip, created_at, id);

--
-- Name: jobs_by_client_beatmap_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_by_client_beatmap_age ON public.jobs USING btree (client_ip, ((replay ->> 'beatmap_md5'::text)), created_at, id);

--
-- Name: jobs_by_client_player_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_by_client_player_age ON public.jobs USING btree (client_ip, lower((replay ->> 'player'::text)), created_at, id);

--
-- Name: jobs_by_client_player_beatmap_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_by_client_player_beatmap_age ON public.jobs USING btree (client_ip, lower((replay ->> 'player'::text)), ((replay ->> 'beatmap_md5'::text)), created_at, id);

--
-- Name: jobs_by_client_status_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_by_client_status_age ON public.jobs USING btree (client_ip, status, created_at, id);

--
-- Name: jobs_ended_by_update; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_ended_by_update ON public.jobs USING btree (updated_at) WHERE (status = ANY (ARRAY['completed'::public.job_status, 'failed'::public.job_status, 'expired'::public.job_status]));

--
-- Name: jobs_failed_by_replay; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_failed_by_replay ON public.jobs USING btree (replay_sha256, updated_at) WHERE ((status = 'failed'::public.job_status) AND (NOT sandbox) AND (error_code = ANY (ARRAY['beatmap_not_found'::text, 'replay_unrenderable'::text])));

--
-- Name: jobs_fair_order; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_fair_order ON public.jobs USING btree (fair_start, id) INCLUDE (render_cost) WHERE ((status = 'queued'::public.job_status) AND (released_at IS NULL));

--
-- Name: jobs_in_flight; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_in_flight ON public.jobs USING btree (started_at) INCLUDE (render_cost) WHERE (status = ANY (ARRAY['downloading'::public.job_status, 'rendering'::public.job_status]));

--
-- Name: jobs_queued_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_queued_by_age ON public.jobs USING btree (created_at) WHERE (status = 'queued'::public.job_status);

--
-- Name: jobs_released_waiting; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_released_waiting ON public.jobs USING btree (released_at, id) INCLUDE (render_cost) WHERE ((status = 'queued'::public.job_status) AND (released_at IS NOT NULL));

--
-- Name: jobs_rendered_by_update; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_rendered_by_update ON public.jobs USING btree (updated_at) WHERE ((status = 'completed'::public.job_status) AND (NOT sandbox));

--
-- Name: jobs_sandbox_by_client_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_sandbox_by_client_age ON public.jobs USING btree (client_ip, created_at) WHERE sandbox;

--
-- Name: jobs_started_by_release; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_started_by_release ON public.jobs USING btree (released_at) WHERE (started_at IS NOT NULL);

--
-- Name: outbox_events_by_job; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX outbox_events_by_job ON public.outbox_events USING btree (job_id);

--
-- Name: outbox_events_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX outbox_events_pending ON public.outbox_events USING btree (available_at) WHERE (status = 'pending'::text);

--
-- Name: skin_ingests_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX skin_ingests_by_age ON public.skin_ingests USING btree (claimed_at);

--
-- Name: skins_by_folded; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX skins_by_folded ON public.skins USING btree (folded);

--
-- Name: skins_folded; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX skins_folded ON public.skins USING btree (folded) WHERE (NOT shadowed);

--
-- Name: skins_listed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX skins_listed ON public.skins USING btree (name COLLATE "C") WHERE (stored_at IS NOT NULL);

--
-- Name: skins_listed_kept; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX skins_listed_kept ON public.skins USING btree (name COLLATE "C") WHERE ((stored_at IS NOT NULL) AND (removed_at IS NULL));

--
-- Name: webhook_nonces_by_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_nonces_by_expiry ON public.webhook_nonces USING btree (expires_at);

--
-- Name: job_callbacks job_callbacks_client; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER job_callbacks_client BEFORE INSERT ON public.job_callbacks FOR EACH ROW EXECUTE FUNCTION public.job_callback_client();

--
-- Name: jobs jobs_count_deletes; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_count_deletes AFTER DELETE ON public.jobs REFERENCING OLD TABLE AS counted_old FOR EACH STATEMENT EXECUTE FUNCTION public.count_job_changes();

--
-- Name: jobs jobs_count_inserts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_count_inserts AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS counted_new FOR EACH STATEMENT EXECUTE FUNCTION public.count_job_changes();

--
-- Name: jobs jobs_count_truncates; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_count_truncates AFTER TRUNCATE ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.reset_job_counts();

--
-- Name: jobs jobs_count_updates; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_count_updates AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS counted_old NEW TABLE AS counted_new FOR EACH STATEMENT EXECUTE FUNCTION public.count_job_changes();

--
-- Name: jobs jobs_event_seq; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_event_seq BEFORE UPDATE OF status, progress ON public.jobs FOR EACH ROW EXECUTE FUNCTION public.count_job_event();

--
-- Name: jobs jobs_push_changes; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_push_changes AFTER UPDATE OF status, progress ON public.jobs FOR EACH ROW WHEN ((new.event_seq <> old.event_seq)) EXECUTE FUNCTION public.queue_job_push();

--
-- Name: jobs jobs_push_inserts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_push_inserts AFTER INSERT ON public.jobs FOR EACH ROW EXECUTE FUNCTION public.queue_job_push();

--
-- Name: jobs jobs_queue_callback; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_queue_callback BEFORE UPDATE OF status, progress ON public.jobs FOR EACH ROW WHEN (((new.callback_url IS NOT NULL) AND (NOT new.sandbox))) EXECUTE FUNCTION public.queue_job_callback();

--
-- Name: job_callbacks job_callbacks_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_callbacks
    ADD CONSTRAINT job_callbacks_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

--
-- Name: job_pushes job_pushes_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.job_pushes
    ADD CONSTRAINT job_pushes_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;

--
-- Name: outbox_events outbox_events_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outbox_events
    ADD CONSTRAINT outbox_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;
