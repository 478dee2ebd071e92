-- Issue 32: a client's own label for a job (`client_reference`, domain/job.rs): stored with it
-- and echoed in its reads, list items, callbacks and live events. Nullable: the jobs of earlier
-- releases have none, and the previous release's code, which never names it, admits as before.
-- Adding a nullable column without a default rewrites nothing.
ALTER TABLE jobs ADD COLUMN client_reference text
    CHECK (char_length(client_reference) BETWEEN 1 AND 128);
