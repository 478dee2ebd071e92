-- farm_state: what the render farm is doing now, for estimates (domain/farm.rs FarmState):
-- {"in_flight": [{"cost", "elapsed_secs"}…], "waiting": n, "rendered": {"cost_secs",
-- "busy_secs", "jobs"}}.
-- - in_flight: every job downloading or rendering (jobs_in_flight: as many rows as the farm
--   holds), its render_cost (null for a job of an earlier release) and how long since a worker
--   first reported it (or, without that, since its release or last update);
-- - waiting: released jobs no worker has taken yet (jobs_released_waiting);
-- - rendered: the real renders completed in the last hour with a cost and a start
--   (jobs_rendered_by_update): their render-seconds and their busy time together, and how many.
CREATE OR REPLACE FUNCTION farm_state() RETURNS jsonb
LANGUAGE sql STABLE AS $$
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
