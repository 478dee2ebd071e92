-- callback_backlog_full: whether a client's undelivered callbacks, with `p_queuing` more its
-- caller is about to queue, have reached the bound past which a progress-only update is not
-- queued (migrations/V12): callback_dispatch.max_pending_per_key, which the dispatcher records
-- from MAX_PENDING_CALLBACKS_PER_KEY at each claim. A status change is queued whatever this
-- says, so nothing but intermediate progress is lost.
--
-- The one rule for every callback a job queues: a live job's update (queue_job_callback) and a
-- sandbox job's schedule, queued at its admission (admit_job). Counts at most the bound's rows
-- of the pending-by-client index.
CREATE OR REPLACE FUNCTION callback_backlog_full(p_client text, p_queuing bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT count(*) + p_queuing >= (SELECT max_pending_per_key FROM callback_dispatch)
      FROM (SELECT FROM job_callbacks
             WHERE client = p_client AND status = 'pending'
             LIMIT (SELECT max_pending_per_key FROM callback_dispatch)) AS undelivered
$$;
