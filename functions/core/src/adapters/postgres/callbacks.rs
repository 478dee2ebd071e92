//! `job_callbacks`: the fair, in-order claim; the marks are the outbox's.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};

use super::outbox::{lease_params, leased_table, LeasedTable};
use crate::adapters::postgres::{self as db, millis};
use crate::domain::job::JobId;
use crate::domain::key::SigningSecret;
use crate::ports::callbacks::{Callback, CallbackClaim};
use crate::ports::leased::{LeasedQueue, Retry};
use crate::ports::StoreError;

pub struct PgCallbackStore {
    pool: Pool,
}

impl PgCallbackStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

const CALLBACKS: LeasedTable = leased_table!("job_callbacks").with_marks(DISPATCHED_SQL, RETRY_SQL);

/// The outbox's mark, and the job's later pending callbacks that the insert trigger
/// (`job_callback_client`) made wait for this one's lease due now: they are next in order. (Only
/// those at exactly its lease's end: a later one's own schedule, a sandbox job's, is kept.)
const DISPATCHED_SQL: &str = "\
WITH old AS MATERIALIZED (
    SELECT id, job_id, sequence, available_at FROM job_callbacks
     WHERE id = ANY($1) AND status = 'pending'
), sent AS (
    UPDATE job_callbacks c
       SET status = 'dispatched', dispatched_at = now(), last_error = NULL
      FROM old
     WHERE c.id = old.id AND c.status = 'pending'
)
UPDATE job_callbacks l
   SET available_at = now()
  FROM old
 WHERE l.job_id = old.job_id AND l.sequence > old.sequence AND l.status = 'pending'
   AND l.available_at = old.available_at AND l.available_at > now()";

/// The outbox's mark, and the job's later pending callbacks moved with it: while it backs off,
/// they are not due either, so a due callback is its job's earliest pending one (or waits
/// behind one in flight), and the claim neither reads nor gives a place to a client whose due
/// rows all wait behind a retry. Those that waited for exactly its lease (the insert trigger)
/// wait for the retry instead, even if it comes sooner; once it has failed for good, they are
/// due now (as in DISPATCHED_SQL). (`old` is MATERIALIZED: inlined, it is probed once per
/// later row, 20 s for a 4,000-callback mark.)
const RETRY_SQL: &str = "\
WITH old AS MATERIALIZED (
    SELECT id, available_at FROM job_callbacks WHERE id = ANY($1) AND status = 'pending'
), retried AS (
    UPDATE job_callbacks e
       SET available_at = now() + r.delay_ms * interval '1 millisecond',
           last_error = r.error,
           status = CASE WHEN e.attempts >= $4 THEN 'failed' ELSE 'pending' END
      FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r (id, delay_ms, error)
     WHERE e.id = r.id AND e.status = 'pending'
    RETURNING e.id, e.job_id, e.sequence, e.status, e.available_at
), later AS (
    UPDATE job_callbacks l
       SET available_at = CASE WHEN l.available_at = old.available_at
                               THEN CASE WHEN r.status = 'pending'
                                         THEN r.available_at ELSE now() END
                               ELSE greatest(l.available_at, r.available_at) END
      FROM retried r
      JOIN old ON old.id = r.id
     WHERE l.job_id = r.job_id AND l.sequence > r.sequence AND l.status = 'pending'
       AND (r.status = 'pending' OR l.available_at = old.available_at)
)
SELECT status FROM retried";

/// As the outbox's claim, but fair per client (key) and in order per job (DESIGN.md §9, "Callbacks
/// have their own outbox"). A walk over the clients with pending callbacks
/// (`job_callbacks_pending_by_client`, one probe per client, at most 1000 per claim) starts after
/// the client where the last claim stopped (`callback_dispatch`) and wraps around; the first `$1`
/// of them with a due callback each give at most `$4` of their oldest due callbacks, merged a round
/// at a time (every client's first, then every client's second, …) up to `$1`. Only a job's
/// earliest pending callback is due, so a job's callbacks arrive in order. The rows are locked in a
/// query of their own, which re-checks that each is still due. The claimed callbacks' later due
/// ones wait for the lease too (`held`), so due means claimable. The rotation moves to the last
/// client served, or, if fewer than `$1` had any due, to the last one walked; the dispatcher's
/// bound on a key's undelivered callbacks is recorded beside it (`$5`, for the `queue_job_callback`
/// trigger). The key's signing secret comes along, none once it is revoked.
const CLAIM_SQL: &str = "\
WITH RECURSIVE rotation AS (
    SELECT last_client FROM callback_dispatch
), walk (client, wrapped, step) AS (
    SELECT last_client, false, 0 FROM rotation
  UNION ALL
    SELECT n.client, n.wrapped, w.step + 1
      FROM walk w
     CROSS JOIN LATERAL (
        SELECT (SELECT c.client FROM job_callbacks c
                 WHERE c.status = 'pending' AND c.client > w.client
                 ORDER BY c.client LIMIT 1) AS after
        OFFSET 0
     ) a
     CROSS JOIN LATERAL (
        SELECT CASE WHEN a.after IS NOT NULL THEN a.after
                    WHEN NOT w.wrapped THEN
                        (SELECT c.client FROM job_callbacks c
                          WHERE c.status = 'pending' ORDER BY c.client LIMIT 1)
               END AS client,
               w.wrapped OR a.after IS NULL AS wrapped
        OFFSET 0
     ) n
     WHERE n.client IS NOT NULL
       AND NOT (n.wrapped AND n.client > (SELECT last_client FROM rotation))
       AND w.step < 1000
), chosen AS (
    SELECT w.client, w.step FROM walk w
     CROSS JOIN LATERAL (SELECT FROM job_callbacks c
                          WHERE c.client = w.client AND c.status = 'pending'
                            AND c.available_at <= now() AND c.attempts < $3
                          LIMIT 1) AS due_one
     WHERE w.step > 0
     ORDER BY w.step
     LIMIT $1
), heads AS (
    SELECT h.id, k.step,
           row_number() OVER (PARTITION BY k.client ORDER BY h.available_at, h.id) AS round
      FROM chosen k
     CROSS JOIN LATERAL (
        SELECT c.id, c.available_at FROM job_callbacks c
         WHERE c.client = k.client AND c.status = 'pending'
           AND c.available_at <= now() AND c.attempts < $3
           AND NOT EXISTS (SELECT FROM job_callbacks e
                            WHERE e.job_id = c.job_id AND e.sequence < c.sequence
                              AND e.status = 'pending')
         ORDER BY c.available_at, c.id
         LIMIT $4
     ) h
), fair AS (
    SELECT id FROM heads ORDER BY round, step LIMIT $1
), due AS (
    SELECT c.id FROM job_callbacks c
     WHERE c.id IN (SELECT id FROM fair)
       AND c.status = 'pending' AND c.available_at <= now() AND c.attempts < $3
       FOR UPDATE OF c SKIP LOCKED
), rotated AS (
    UPDATE callback_dispatch
       SET last_client = coalesce(CASE
               WHEN (SELECT count(*) FROM chosen) >= $1
               THEN (SELECT client FROM chosen ORDER BY step DESC LIMIT 1)
               ELSE (SELECT client FROM walk ORDER BY step DESC LIMIT 1)
           END, last_client),
           max_pending_per_key = $5
), held AS (
    UPDATE job_callbacks l
       SET available_at = now() + $2 * interval '1 millisecond'
      FROM due d
      JOIN job_callbacks c ON c.id = d.id
     WHERE l.job_id = c.job_id AND l.sequence > c.sequence AND l.status = 'pending'
       AND l.available_at <= now()
)
UPDATE job_callbacks c
   SET available_at = now() + $2 * interval '1 millisecond',
       attempts = c.attempts + 1
  FROM due, jobs j
  LEFT JOIN api_keys k ON j.client_ip = 'key:' || k.id::text AND k.revoked_at IS NULL
 WHERE c.id = due.id AND j.id = c.job_id
RETURNING c.id, c.job_id, c.sequence, c.url,
          -- The job's client_reference, as every callback of the job carries it.
          c.body || jsonb_strip_nulls(jsonb_build_object('client_reference', j.client_reference)),
          c.attempts, k.signing_secret";

#[async_trait]
impl LeasedQueue for PgCallbackStore {
    type Item = Callback;
    type Claim = CallbackClaim;

    async fn claim(&self, claim: CallbackClaim) -> Result<Vec<Callback>, StoreError> {
        let CallbackClaim { lease, shares } = claim;
        let lease_ms = millis(lease.lease);
        let [limit, lease, attempts] = lease_params(&lease, &lease_ms);
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            limit,
            lease,
            attempts,
            (&shares.per_client, Type::INT8),
            (&shares.max_pending_per_key, Type::INT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let rows = conn.query_typed(CLAIM_SQL, &params).await?;
        Ok(rows
            .iter()
            .map(|row| Callback {
                id: row.get(0),
                job_id: JobId::from(row.get::<_, uuid::Uuid>(1)),
                sequence: row.get(2),
                url: row.get(3),
                body: row.get(4),
                attempts: row.get(5),
                signing_secret: row.get::<_, Option<&str>>(6).and_then(SigningSecret::parse),
            })
            .collect())
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        CALLBACKS.mark_dispatched(&self.pool, ids).await
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        CALLBACKS
            .mark_retry(&self.pool, retries, max_attempts)
            .await
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        CALLBACKS.fail_exhausted(&self.pool, max_attempts).await
    }

    async fn next_due(&self, max_attempts: i32) -> Result<Option<Duration>, StoreError> {
        CALLBACKS.next_due(&self.pool, max_attempts).await
    }
}
