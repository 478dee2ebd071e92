//! The `api_keys` table: API keys by the SHA-256 of the key.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::adapters::postgres::{self as db};
use crate::domain::entitlement::{DeniableOption, DeniedOptions, Entitlements};
use crate::domain::farm::Weight;
use crate::domain::key::{
    KeyHash, KeyId, KeyKind, KeyLimits, KeyName, LimitsChange, SigningSecret,
};
use crate::domain::{RateLimit, Resolution};
use crate::ports::keys::{
    KeyRecord, KeyStore, KeySummary, LimitsUpdate, NewKey, Revocation, MAX_LIST, MAX_LIVE_HASHES,
};
use crate::ports::StoreError;

pub struct PgKeyStore {
    pool: Pool,
}

impl PgKeyStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, StoreError> {
        db::query(&self.pool, sql, params)
            .await
            .map_err(schema_missing)
    }
}

/// SQLSTATE 42P01, undefined_table (`StoreError` from a server error starts with its code):
/// a database whose migrations have not made `api_keys` yet. Said plainly, with what to do.
fn schema_missing(error: StoreError) -> StoreError {
    if error.message().starts_with("42P01:") {
        StoreError::new(
            "the database has no `api_keys` table: apply the migrations first \
             (`migrate`; docs/DEPLOY.md, \"Migrations on deploy\")",
        )
    } else {
        error
    }
}

const CREATE_SQL: &str = "\
INSERT INTO api_keys (id, name, key_hash, kind, render_limit_requests, render_limit_period_secs,
                      max_active, signing_secret, max_resolution, denied_options,
                      max_replay_length_secs, weight)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
RETURNING created_at";

const SUMMARY_COLUMNS: &str = "id, name, kind, render_limit_requests, render_limit_period_secs, \
                               max_active, created_at, revoked_at, max_resolution, \
                               denied_options, max_replay_length_secs, weight";
/// The column after `SUMMARY_COLUMNS`.
const AFTER_SUMMARY: usize = 12;

/// The key's row after the change and `true`; for a revoked key, its row as of the statement's
/// snapshot and `false`; for no key, no row.
fn change_limits_sql() -> String {
    format!(
        "\
WITH changed AS (
    UPDATE api_keys
    SET weight = COALESCE($2, weight), max_active = COALESCE($3, max_active)
    WHERE id = $1 AND revoked_at IS NULL
    RETURNING {SUMMARY_COLUMNS}
)
SELECT {SUMMARY_COLUMNS}, true FROM changed
UNION ALL
SELECT {SUMMARY_COLUMNS}, false FROM api_keys WHERE id = $1 AND NOT EXISTS (SELECT FROM changed)"
    )
}

/// Whether this statement revoked the key, and the key's row as it was before it (the outer
/// query's snapshot is the statement's), which tells an earlier revocation from no key.
const REVOKE_SQL: &str = "\
WITH revoked AS (
    UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL
    RETURNING revoked_at
)
SELECT (SELECT revoked_at FROM revoked),
       EXISTS (SELECT FROM api_keys WHERE id = $1),
       (SELECT revoked_at FROM api_keys WHERE id = $1)";

#[async_trait]
impl KeyStore for PgKeyStore {
    async fn create(&self, key: &NewKey) -> Result<DateTime<Utc>, StoreError> {
        let requests = i32::try_from(key.limits.render.requests)
            .map_err(|_| StoreError::new("render limit out of range"))?;
        let period = i64::try_from(key.limits.render.period_secs)
            .map_err(|_| StoreError::new("render period out of range"))?;
        let max_active = int4(key.limits.max_active, "max_active")?;
        let entitlements = &key.limits.entitlements;
        let max_resolution = entitlements.max_resolution.map(Resolution::as_str);
        let denied = entitlements.denied.names();
        let max_replay_length = key
            .limits
            .max_replay_length
            .map(i32::try_from)
            .transpose()
            .map_err(|_| StoreError::new("max_replay_length out of range"))?;
        let weight = int4(key.limits.weight.get(), "weight")?;
        let hash = &key.hash.as_bytes()[..];
        let params: [(&(dyn ToSql + Sync), Type); 12] = [
            (&key.id.0, Type::UUID),
            (&key.name.as_str(), Type::TEXT),
            (&hash, Type::BYTEA),
            (&key.kind.as_str(), Type::TEXT),
            (&requests, Type::INT4),
            (&period, Type::INT8),
            (&max_active, Type::INT4),
            (&key.signing_secret.expose(), Type::TEXT),
            (&max_resolution, Type::TEXT),
            (&denied, Type::TEXT_ARRAY),
            (&max_replay_length, Type::INT4),
            (&weight, Type::INT4),
        ];
        let row = self
            .query(CREATE_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| StoreError::unknown("the insert returned no row"))?;
        Ok(row.get(0))
    }

    async fn list(&self, limit: usize) -> Result<Vec<KeySummary>, StoreError> {
        let limit = i64::try_from(limit.min(MAX_LIST)).unwrap_or(0);
        let sql =
            format!("SELECT {SUMMARY_COLUMNS} FROM api_keys ORDER BY created_at DESC, id LIMIT $1");
        self.query(&sql, &[(&limit, Type::INT8)])
            .await?
            .iter()
            .map(summary)
            .collect()
    }

    async fn revoke(&self, id: KeyId) -> Result<Revocation, StoreError> {
        let row = self
            .query(REVOKE_SQL, &[(&id.0, Type::UUID)])
            .await?
            .pop()
            .ok_or_else(|| StoreError::unknown("the revocation returned no row"))?;
        let now: Option<DateTime<Utc>> = row.get(0);
        let exists: bool = row.get(1);
        let before: Option<DateTime<Utc>> = row.get(2);
        Ok(match (now, exists, before) {
            (Some(at), _, _) => Revocation::Revoked(at),
            (None, true, Some(at)) => Revocation::AlreadyRevoked(at),
            // Revoked by a concurrent statement after this one's snapshot: revoked all the same.
            (None, true, None) => Revocation::AlreadyRevoked(Utc::now()),
            (None, false, _) => Revocation::NoSuchKey,
        })
    }

    async fn change_limits(
        &self,
        id: KeyId,
        change: LimitsChange,
    ) -> Result<LimitsUpdate, StoreError> {
        let weight = change
            .weight()
            .map(|w| int4(w.get(), "weight"))
            .transpose()?;
        let max_active = change
            .max_active()
            .map(|n| int4(n, "max_active"))
            .transpose()?;
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&id.0, Type::UUID),
            (&weight, Type::INT4),
            (&max_active, Type::INT4),
        ];
        let Some(row) = self.query(&change_limits_sql(), &params).await?.pop() else {
            return Ok(LimitsUpdate::NoSuchKey);
        };
        let key = summary(&row)?;
        let changed: bool = row.get(AFTER_SUMMARY);
        Ok(match (changed, key.revoked_at) {
            (true, _) => LimitsUpdate::Changed(key),
            (false, Some(at)) => LimitsUpdate::Revoked(at),
            // Revoked by a concurrent statement after this one's snapshot: revoked all the same.
            (false, None) => LimitsUpdate::Revoked(Utc::now()),
        })
    }

    async fn find_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        let sql =
            format!("SELECT {SUMMARY_COLUMNS}, signing_secret FROM api_keys WHERE key_hash = $1");
        let hash = &hash.as_bytes()[..];
        let Some(row) = self.query(&sql, &[(&hash, Type::BYTEA)]).await?.pop() else {
            return Ok(None);
        };
        let secret: String = row.get(AFTER_SUMMARY);
        Ok(Some(KeyRecord {
            summary: summary(&row)?,
            signing_secret: SigningSecret::parse(&secret)
                .ok_or_else(|| corrupt("signing_secret"))?,
        }))
    }

    async fn live_hashes(&self, limit: usize) -> Result<Vec<KeyHash>, StoreError> {
        let limit = i64::try_from(limit.min(MAX_LIVE_HASHES)).unwrap_or(0);
        // An index-only scan of `api_keys_live`, not a scan of every key ever issued.
        let sql = "SELECT key_hash FROM api_keys WHERE revoked_at IS NULL LIMIT $1";
        self.query(sql, &[(&limit, Type::INT8)])
            .await?
            .iter()
            .map(|row| KeyHash::from_bytes(row.get(0)).ok_or_else(|| corrupt("key_hash")))
            .collect()
    }
}

/// A row of `SUMMARY_COLUMNS`. The table's checks keep every value valid; one that is not
/// anyway (a hand edit) is an error, never a panic.
fn summary(row: &Row) -> Result<KeySummary, StoreError> {
    let name: String = row.get(1);
    let kind: String = row.get(2);
    let requests: i32 = row.get(3);
    let period: i64 = row.get(4);
    let max_active: i32 = row.get(5);
    let render = RateLimit {
        requests: u32::try_from(requests).map_err(|_| corrupt("render_limit_requests"))?,
        period_secs: u64::try_from(period).map_err(|_| corrupt("render_limit_period_secs"))?,
    };
    let max_active = u32::try_from(max_active).map_err(|_| corrupt("max_active"))?;
    let max_resolution: Option<&str> = row.get(8);
    let max_resolution = max_resolution
        .map(Resolution::parse)
        .transpose()
        .map_err(|_| corrupt("max_resolution"))?;
    let denied: Vec<&str> = row.get(9);
    // A name this code does not know is an option it cannot render either.
    let denied = denied
        .into_iter()
        .filter_map(DeniableOption::parse)
        .fold(DeniedOptions::default(), DeniedOptions::with);
    let max_replay_length: Option<i32> = row.get(10);
    let max_replay_length = max_replay_length
        .map(u32::try_from)
        .transpose()
        .map_err(|_| corrupt("max_replay_length_secs"))?;
    let weight: i32 = row.get(11);
    let limits = KeyLimits {
        render,
        max_active,
        entitlements: Entitlements {
            max_resolution,
            denied,
        },
        max_replay_length,
        weight: u32::try_from(weight)
            .ok()
            .and_then(|weight| Weight::new(weight).ok())
            .ok_or_else(|| corrupt("weight"))?,
    };
    Ok(KeySummary {
        id: KeyId(row.get(0)),
        name: KeyName::parse(&name).map_err(|_| corrupt("name"))?,
        kind: KeyKind::parse(&kind).ok_or_else(|| corrupt("kind"))?,
        limits,
        created_at: row.get(6),
        revoked_at: row.get(7),
    })
}

/// A limit as its `integer` column holds it.
fn int4(value: u32, column: &str) -> Result<i32, StoreError> {
    i32::try_from(value).map_err(|_| StoreError::new(format!("{column} out of range")))
}

fn corrupt(column: &str) -> StoreError {
    StoreError::new(format!("api_keys: an invalid `{column}`"))
}
