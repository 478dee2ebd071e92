-- count_job_changes: keeps job_counts (migrations/V11: one row, the active jobs by what the
-- global caps compare) in step with every change of a job, whoever makes it.
--
-- A statement's net change of the counts, from its transition tables (rows before and after),
-- applied once at the statement's end: one row update however many jobs it changed, none when
-- it changed no count (a progress report). Taken last in the statement, after its row locks,
-- so two statements never wait on each other in opposite orders.
--
-- The triggers (migrations/V11, one per event: a trigger with transition tables serves one):
-- jobs_count_inserts (NEW TABLE counted_new), jobs_count_updates (OLD TABLE counted_old, NEW
-- TABLE counted_new), jobs_count_deletes (OLD TABLE counted_old), AFTER … FOR EACH STATEMENT.
CREATE OR REPLACE FUNCTION count_job_changes() RETURNS trigger
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
