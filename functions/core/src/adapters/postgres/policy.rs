//! The `intake_pause` and `bans` tables: the operator's policy.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::adapters::postgres::{self as db};
use crate::domain::policy::{Ban, BanTarget, Pause, Policy, Reason};
use crate::ports::policy::{NewBan, PolicyStore, MAX_BANS};
use crate::ports::StoreError;

pub struct PgPolicyStore {
    pool: Pool,
}

impl PgPolicyStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

/// The pause (if any) and the bans in force, in one statement: one row, the bans as arrays
/// (NULL when there is none). `bans_in_force` serves `until > now()`, longest lasting first.
const READ_SQL: &str = "\
SELECT p.anonymous_only, p.reason, p.since,
       b.ids, b.kinds, b.targets, b.reasons, b.untils, b.created
  FROM (SELECT array_agg(id) AS ids, array_agg(kind) AS kinds,
               array_agg(coalesce(address::text, key_id::text, player)) AS targets,
               array_agg(reason) AS reasons, array_agg(NULLIF(until, 'infinity')) AS untils,
               array_agg(created_at) AS created
          FROM (SELECT * FROM bans WHERE until > now() ORDER BY until DESC LIMIT $1) AS b) AS b
  LEFT JOIN intake_pause AS p ON true";

const PAUSE_COLUMNS: &str = "anonymous_only, reason, since";

/// A ban's columns as `ban` reads them (`until` NULL for one until removed).
const BAN_COLUMNS: &str = "id, kind, coalesce(address::text, key_id::text, player), reason, \
                           NULLIF(until, 'infinity'), created_at";

#[async_trait]
impl PolicyStore for PgPolicyStore {
    async fn read(&self, max_bans: usize) -> Result<Policy, StoreError> {
        let limit = i64::try_from(max_bans.min(MAX_BANS)).unwrap_or(0);
        let row = db::query(&self.pool, READ_SQL, &[(&limit, Type::INT8)])
            .await?
            .pop()
            .ok_or_else(|| StoreError::new("the policy read returned no row"))?;
        let pause = row.get::<_, Option<bool>>(0).map(|anonymous_only| Pause {
            anonymous_only,
            reason: reason(row.get(1)),
            since: row.get(2),
        });
        let ids: Vec<i64> = row.get::<_, Option<_>>(3).unwrap_or_default();
        let kinds: Vec<String> = row.get::<_, Option<_>>(4).unwrap_or_default();
        let targets: Vec<String> = row.get::<_, Option<_>>(5).unwrap_or_default();
        let reasons: Vec<Option<String>> = row.get::<_, Option<_>>(6).unwrap_or_default();
        let untils: Vec<Option<DateTime<Utc>>> = row.get::<_, Option<_>>(7).unwrap_or_default();
        let created: Vec<DateTime<Utc>> = row.get::<_, Option<_>>(8).unwrap_or_default();
        // One row a hand edit made unreadable is skipped (logged), not the whole policy: the
        // instance must not keep a stale policy, or none, for one bad row.
        let bans = (0..ids.len())
            .filter_map(|i| {
                let target = target(&kinds[i], &targets[i])
                    .inspect_err(|error| tracing::warn!(%error, id = ids[i], "ban skipped"))
                    .ok()?;
                Some(Ban {
                    id: ids[i],
                    target,
                    reason: reason(reasons.get(i).cloned().flatten()),
                    until: untils.get(i).copied().flatten(),
                    created_at: *created.get(i)?,
                })
            })
            .collect();
        Ok(Policy { pause, bans })
    }

    async fn pause(
        &self,
        anonymous_only: bool,
        reason: Option<&Reason>,
    ) -> Result<Pause, StoreError> {
        let sql = format!(
            "INSERT INTO intake_pause (anonymous_only, reason) VALUES ($1, $2)
             ON CONFLICT (one) DO UPDATE
                SET anonymous_only = EXCLUDED.anonymous_only, reason = EXCLUDED.reason,
                    since = now()
             RETURNING {PAUSE_COLUMNS}"
        );
        let reason = reason.map(Reason::as_str);
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&anonymous_only, Type::BOOL), (&reason, Type::TEXT)];
        let row = db::query(&self.pool, &sql, &params).await?.pop();
        row.map(|row| pause(&row))
            .ok_or_else(|| StoreError::unknown("the pause returned no row"))?
    }

    async fn resume(&self) -> Result<Option<Pause>, StoreError> {
        let sql = format!("DELETE FROM intake_pause RETURNING {PAUSE_COLUMNS}");
        db::query(&self.pool, &sql, &[])
            .await?
            .pop()
            .map(|row| pause(&row))
            .transpose()
    }

    async fn add_ban(&self, ban: &NewBan) -> Result<Ban, StoreError> {
        let (address, key_id, player) = match &ban.target {
            BanTarget::Address(range) => (Some(range.to_string()), None, None),
            BanTarget::Key(id) => (None, Some(id.0), None),
            BanTarget::Player(name) => (None, None, Some(name.as_str())),
        };
        let kind = ban.target.kind();
        let reason = ban.reason.as_ref().map(Reason::as_str);
        let sql = format!(
            "INSERT INTO bans (kind, address, key_id, player, reason, until)
             VALUES ($1, $2::text::cidr, $3, $4, $5, coalesce($6, 'infinity'))
             RETURNING {BAN_COLUMNS}"
        );
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&kind, Type::TEXT),
            (&address, Type::TEXT),
            (&key_id, Type::UUID),
            (&player, Type::TEXT),
            (&reason, Type::TEXT),
            (&ban.until, Type::TIMESTAMPTZ),
        ];
        let row = db::query(&self.pool, &sql, &params).await?.pop();
        row.map(|row| self::ban(&row))
            .ok_or_else(|| StoreError::unknown("the ban's insert returned no row"))?
    }

    async fn remove_ban(&self, id: i64) -> Result<Option<Ban>, StoreError> {
        let sql = format!("DELETE FROM bans WHERE id = $1 RETURNING {BAN_COLUMNS}");
        let row = db::query(&self.pool, &sql, &[(&id, Type::INT8)])
            .await?
            .pop();
        row.map(|row| ban(&row)).transpose()
    }
}

fn pause(row: &Row) -> Result<Pause, StoreError> {
    Ok(Pause {
        anonymous_only: row.get(0),
        reason: reason(row.get(1)),
        since: row.get(2),
    })
}

fn ban(row: &Row) -> Result<Ban, StoreError> {
    let kind: String = row.get(1);
    let value: String = row.get(2);
    Ok(Ban {
        id: row.get(0),
        target: target(&kind, &value)?,
        reason: reason(row.get(3)),
        until: row.get(4),
        created_at: row.get(5),
    })
}

/// The table's checks keep every value valid; one that is not anyway (a hand edit) is an
/// error, never a panic.
fn target(kind: &str, value: &str) -> Result<BanTarget, StoreError> {
    BanTarget::parse(kind, value).map_err(|e| StoreError::new(format!("bans: {e}")))
}

/// A reason a hand edit made invalid is dropped (logged): the pause or ban still holds.
fn reason(text: Option<String>) -> Option<Reason> {
    let text = text?;
    Reason::parse(&text)
        .inspect_err(|error| tracing::warn!(%error, "an invalid reason dropped"))
        .ok()
}
