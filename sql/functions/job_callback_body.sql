-- job_callback_body: the body of a job's callback number `p_sequence`: what changed, as
-- GET /v1/jobs/{id} shows it, with the job's `replay`, and a failed job's `error_code` and
-- `retryable`, and a completed job's `links.video` (and `links.thumbnail` when it has one: the
-- paths that redirect to fresh presigned URLs) (migrations/V14; a job of an earlier release has no `replay`, and its callbacks
-- none). Used by queue_job_callback (a job's status
-- changes) and by admit_job (the callbacks queued at admission). Defined by migrations/V10.
-- `replay` is added after the nulls are stripped: its own null members (`online_id`) stay.
CREATE OR REPLACE FUNCTION job_callback_body(
    p_job uuid, p_sequence integer, p_status text, p_progress real, p_error text,
    p_at timestamptz, p_replay jsonb, p_error_code text, p_retryable boolean,
    p_has_thumbnail boolean
) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
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
