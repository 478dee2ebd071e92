-- release_jobs: hands the farm the next jobs of the queue of record (DESIGN.md "Fair service"),
-- as many as it has room for, in fair order, and returns their render events leased to the
-- caller, which publishes them at once (the outbox sweep delivers any it does not).
--
-- Room: the farm holds at most render_slots + release_ahead jobs released and not finished —
-- downloading or rendering (job_counts), or released and still queued (a partial index of at
-- most that many rows). Order: the smallest start tag first, then the id (jobs_fair_order),
-- so one client's jobs go first in, first out, and across clients by start-time fair queuing.
-- fair_clock advances to the largest start tag released: a client arriving later starts
-- there, and banks no credit for the time it was idle.
--
-- Race-free: it takes the global capacity lock admit_job takes, so two releasers never count
-- the same room or release one job twice, and no admission reads the clock while it moves.
-- One statement, autocommit: what it returns is committed.
--
-- The argument, one jsonb object: global_lock, lock_timeout_ms, render_slots, release_ahead,
-- event_lease_ms (all required); after_admission_of (optional): the release pipelined behind an
-- admission runs only if that job was admitted, so a refused request leaves the release (and
-- the events it would lease) to the next releaser rather than dropping them.
CREATE OR REPLACE FUNCTION release_jobs(p jsonb)
RETURNS TABLE (event_id bigint, job_id uuid, payload jsonb, attempts integer, fair_client text)
LANGUAGE plpgsql VOLATILE AS $$
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
