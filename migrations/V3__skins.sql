-- Uploaded skin names (functions/core/src/skins/store.rs). An upload claims its name here before
-- its object is written to S3, so of two uploads of one new name exactly one inserts the row and
-- wins; `stored_at` is set once the object is in S3. A claim never confirmed (the function died
-- between claim and write) is taken over once it is older than any function can run.
CREATE TABLE skins (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_ -]{1,128}$'),
    claim      uuid NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    stored_at  timestamptz
);
