//! One page of a client's `GET /v1/jobs`: a statement per filter shape, each served by an index.

use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};

use super::JOB_SELECT;
use crate::adapters::postgres::millis;
use crate::domain::client::ClientKey;
use crate::domain::sandbox;
use crate::ports::jobs::{JobQuery, TOTAL_CAP};

/// The statement of one page of a client's `GET /v1/jobs`: a backward range scan of
/// `jobs_by_client_age`, or with a status (compared as the enum) of `jobs_by_client_status_age`, or
/// with a player or beatmap of `jobs_by_client_player_age` or `jobs_by_client_beatmap_age` (both:
/// `jobs_by_client_player_beatmap_age`), from the cursor's `(created_at, id)` on, one row more than
/// the page (`JobPage::from_rows`). A sandbox key's status filter is an age range of
/// `jobs_by_client_age` (its jobs show the status their age makes). Each shape is its own
/// statement, so no `$n IS NULL` branch keeps the planner from the index. Public so a test can
/// `EXPLAIN` exactly it.
pub struct PageStatement {
    pub sql: String,
    /// The count of every match (the cursor aside), up to `TOTAL_CAP + 1` rows of the same
    /// index range: the listing's `total`.
    pub count_sql: String,
    /// The parameters, in the order the statement numbers them; the count's are the first
    /// `count_params` of them.
    params: Vec<PageParam>,
    count_params: usize,
}

/// One parameter of a page's statement.
enum PageParam {
    Text(String),
    Int(i64),
    Time(chrono::DateTime<chrono::Utc>),
    Id(uuid::Uuid),
}

impl PageStatement {
    pub fn new(client: &ClientKey, query: &JobQuery) -> Self {
        let mut filter = String::from("j.client_ip = $1");
        let mut params = vec![PageParam::Text(client.as_str().to_owned())];
        // Each condition's `{}` are its parameters, numbered in turn.
        let mut and = |condition: &str, values: Vec<PageParam>| {
            let mut condition = condition.to_owned();
            for value in values {
                params.push(value);
                condition = condition.replacen("{}", &format!("${}", params.len()), 1);
            }
            filter += &format!(" AND {condition}");
        };
        let ago = |age: Duration| PageParam::Int(millis(age));
        match query.status {
            Some(status) if query.sandbox => match sandbox::shown_between(status) {
                None => and("false", vec![]),
                Some((from, until)) => {
                    and(
                        "j.created_at <= now() - {}::bigint * interval '1 millisecond'",
                        vec![ago(from)],
                    );
                    if let Some(until) = until {
                        and(
                            "j.created_at > now() - {}::bigint * interval '1 millisecond'",
                            vec![ago(until)],
                        );
                    }
                    if !status.is_active() {
                        let stored = PageParam::Text(status.as_str().to_owned());
                        and("j.status = {}::text::job_status", vec![stored]);
                    }
                }
            },
            Some(status) => and(
                "j.status = {}::text::job_status",
                vec![PageParam::Text(status.as_str().to_owned())],
            ),
            None => {}
        }
        if let Some(player) = &query.player {
            and(
                "lower(j.replay ->> 'player') = lower({}::text)",
                vec![PageParam::Text(player.clone())],
            );
        }
        if let Some(md5) = &query.beatmap_md5 {
            and(
                "(j.replay ->> 'beatmap_md5') = {}::text",
                vec![PageParam::Text(md5.to_string())],
            );
        }
        let count_sql = format!(
            "SELECT count(*) FROM (SELECT FROM jobs j WHERE {filter} LIMIT {}) AS matching",
            TOTAL_CAP + 1
        );
        let count_params = params.len();
        // The page starts after the cursor; the count does not.
        if let Some(cursor) = query.after {
            params.push(PageParam::Time(cursor.created_at));
            params.push(PageParam::Id(cursor.id.as_uuid()));
            filter += &format!(
                " AND (j.created_at, j.id) < (${}, ${})",
                params.len() - 1,
                params.len()
            );
        }
        params.push(PageParam::Int(query.limit.saturating_add(1)));
        Self {
            sql: format!(
                "{JOB_SELECT} WHERE {filter} ORDER BY j.created_at DESC, j.id DESC LIMIT ${}",
                params.len()
            ),
            count_sql,
            params,
            count_params,
        }
    }

    /// The count's parameters, in the order it numbers them.
    pub fn count_params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        let mut params = self.params();
        params.truncate(self.count_params);
        params
    }

    /// The parameters, in the order the statement numbers them.
    pub fn params(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params
            .iter()
            .map(|param| -> (&(dyn ToSql + Sync), Type) {
                match param {
                    PageParam::Text(text) => (text, Type::TEXT),
                    PageParam::Int(value) => (value, Type::INT8),
                    PageParam::Time(time) => (time, Type::TIMESTAMPTZ),
                    PageParam::Id(id) => (id, Type::UUID),
                }
            })
            .collect()
    }
}
