-- queue_place: a queued job's place in the release order (domain/farm.rs QueuePlace):
-- {"position", "ahead": [cost…], "rest", "cost"}, or NULL when the job is not queued.
-- p_job: the job; or NULL for a job not yet made whose start tag would be p_start (a new
-- client's is the clock: GET /v1/status), placed after every job of that tag.
--
-- Ahead of a released job are the released jobs no worker has taken, released before it; ahead
-- of one still waiting in the queue of record are all of those and the waiting jobs before it
-- in fair order (start tag, then id). The first c_listed come one by one (in order), the rest
-- summed: one range of jobs_released_waiting (a few rows) and one of jobs_fair_order (index
-- only, as long as the queue ahead).
CREATE OR REPLACE FUNCTION queue_place(p_job uuid, p_start double precision) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
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
