-- From this release on, every SQL function's body lives in its own file in sql/functions/, and
-- the runner replaces each one after the versioned migrations. This migration records that
-- change in the history (admit_job now refuses a missing, null or unknown key of its argument):
-- an older release deployed again sees a newer schema and leaves the functions alone, rather
-- than putting its own bodies back (sql/functions/README.md).
COMMENT ON FUNCTION admit_job(jsonb) IS
    'Admits one job under the global and client locks; its argument''s keys are checked '
    '(sql/functions/admit_job.sql).';
