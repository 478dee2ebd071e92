//! Job reads: one job by its id, and the caller's own jobs by cursor pages.
//!
//! A job's id is a capability: whoever holds it (the submitter got it in the 202) may read the
//! job, artifact links included, and a random UUID cannot be guessed. The list is the caller's
//! own jobs only (its API key's client, as admission counts it), without artifact links: those
//! are only handed out one job at a time. Without a key the list is a 401 `api_key_required`:
//! an address is no identity to list jobs by.
//!
//! Reads are rate-limited per client (the key, with one) under their own generous limit
//! (`RATE_LIMIT_READ`, endpoint `jobs`), after the request itself has been checked, so a
//! malformed one costs no quota. Nothing shown identifies the submitter: the store does not
//! even select it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::failure::FailureCode;
use crate::domain::hash::Md5;
use crate::domain::job::{JobId, JobStatus};
use crate::domain::page;
use crate::domain::rate::RateDecision;
use crate::domain::text;
/// A page of the listing, as `list_jobs` takes it (what `ListParams::query` checks).
pub use crate::ports::jobs::JobQuery;
use crate::ports::jobs::{JobRecord, PageCursor, TOTAL_CAP};
use crate::support::config::Config;
use crate::support::estimate;
use crate::support::problem::{InvalidParam, Rejection};
use crate::usecases::app::App;
use crate::usecases::request::{check_rate_limit, Submission};

/// The rate-limited endpoint name both reads count against.
pub const JOBS_ENDPOINT: &str = "jobs";
pub const DEFAULT_PAGE: i64 = 20;
pub const MAX_PAGE: i64 = 100;

/// `GET /v1/jobs/{id}`: the job, with its artifact links once it is completed.
pub async fn read_job(app: &App, caller: &Caller, id: JobId) -> Submission<JobView> {
    let rate = match limit_reads(app, caller.client()).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = match app.job_reads.find(id).await {
        Ok(Some(job)) => {
            let artifacts = artifacts_of(app, &job).await;
            Ok(JobView::new(app, job, artifacts))
        }
        Ok(None) => Err(Rejection::NotFound(format!("no job {id}"))),
        Err(error) => Err(error.into_rejection("job read")),
    };
    Submission { outcome, rate }
}

/// A completed job's artifact, as `GET /v1/jobs/{id}/video` and `/thumbnail` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    Video,
    Thumbnail,
}

impl Artifact {
    fn noun(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Thumbnail => "thumbnail",
        }
    }
}

/// `GET /v1/jobs/{id}/video` (or `/thumbnail`): a freshly presigned URL of the completed job's
/// artifact, for a 302. The path outlives any presigned URL: a bot can post it in a chat, and
/// each click signs anew. Counted as a read; whoever holds the job id may follow it, as they
/// may read the job.
pub async fn artifact_link(
    app: &App,
    caller: &Caller,
    id: JobId,
    artifact: Artifact,
) -> Submission<String> {
    let rate = match limit_reads(app, caller.client()).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = match app.job_reads.find(id).await {
        Ok(Some(job)) => {
            let key = match artifact {
                Artifact::Video => job.video_key.as_deref(),
                Artifact::Thumbnail => job.thumb_key.as_deref(),
            };
            match (job.status, key) {
                (JobStatus::Completed, Some(key)) => {
                    presign(app, key, app.config.http.artifact_url_ttl)
                        .await
                        .map_err(|error| {
                            tracing::error!(%error, "could not presign an artifact URL");
                            Rejection::StorageFailed
                        })
                }
                (JobStatus::Completed, None) => Err(Rejection::NotFound(format!(
                    "job {id} was rendered without a {}",
                    artifact.noun()
                ))),
                (status, _) => Err(Rejection::NotFound(format!(
                    "job {id} has no {} until it is completed; it is {status}",
                    artifact.noun()
                ))),
            }
        }
        Ok(None) => Err(Rejection::NotFound(format!("no job {id}"))),
        Err(error) => Err(error.into_rejection("job read")),
    };
    Submission { outcome, rate }
}

/// `GET /v1/jobs`: one page of the caller's jobs; a keyed caller's only.
pub async fn list_jobs(app: &App, caller: &Caller, query: &JobQuery) -> Submission<JobPage> {
    if caller.is_anonymous() {
        // An address is shared (NAT, carrier, office) and borrowed (any page a browser
        // visits): it lists no one's jobs. Refused before any quota is spent.
        return Submission::refused(Rejection::ApiKeyRequired(
            "listing jobs needs `Authorization: Bearer <key>`; without a key, follow each job by \
             the job_id its 202 gave",
        ));
    }
    let rate = match limit_reads(app, caller.client()).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let query = &JobQuery {
        sandbox: caller.is_sandbox(),
        ..query.clone()
    };
    let outcome = match app.job_reads.list(caller.client(), query).await {
        Ok(page) => {
            let next_cursor = page.next.map(|cursor| cursor.encode());
            Ok(JobPage {
                items: page
                    .jobs
                    .into_iter()
                    .map(|job| JobView::new(app, job, None))
                    .collect(),
                limit: query.limit,
                total: page.total.map(|total| total.min(TOTAL_CAP)),
                total_capped: page.total.map(|total| total > TOTAL_CAP),
                next: next_cursor
                    .as_deref()
                    .map(|cursor| app.config.http.link(&next_path(query, cursor))),
                next_cursor,
            })
        }
        Err(error) => Err(error.into_rejection("job read")),
    };
    Submission { outcome, rate }
}

/// `GET /v1/jobs` query parameters; anything else is ignored, but for `offset`, which is refused
/// (`cursor` pages; a client sending `offset` would be shown its first page forever).
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    pub limit: Option<String>,
    pub status: Option<String>,
    pub player: Option<String>,
    pub beatmap_md5: Option<String>,
    pub cursor: Option<String>,
    pub offset: Option<String>,
}

/// The longest player name a filter can match: a job stores at most this much of it.
const MAX_PLAYER_FILTER_CHARS: usize = 64;

impl ListParams {
    /// The query, or every bad parameter (`invalid_params`), in this order: `offset`, `limit`,
    /// `status`, `player`, `beatmap_md5`, `cursor`.
    pub fn query(&self) -> Result<JobQuery, Rejection> {
        let mut invalid = Vec::new();
        if self.offset.is_some() {
            invalid.push(InvalidParam {
                name: "offset".into(),
                reason: "replaced by `cursor`; follow a page's `next`".into(),
            });
        }
        let limit = page::limit(self.limit.as_deref(), DEFAULT_PAGE, MAX_PAGE);
        let limit = InvalidParam::collect(&mut invalid, "limit", limit);
        let status = self.status.as_deref().map(str::parse::<JobStatus>);
        let status = InvalidParam::collect(
            &mut invalid,
            "status",
            status.transpose().map_err(|e| e.to_string()),
        );
        let player = self.player.as_deref().map(|player| {
            if player.chars().any(char::is_control) {
                return Err("must not hold control characters".to_owned());
            }
            // Names are stored without format characters (domain/text.rs): so is the filter.
            let player: String = player.chars().filter(|c| !text::is_hidden(*c)).collect();
            match player.chars().count() {
                1..=MAX_PLAYER_FILTER_CHARS => Ok(player),
                _ => Err(format!("must be 1 to {MAX_PLAYER_FILTER_CHARS} characters")),
            }
        });
        let player = InvalidParam::collect(&mut invalid, "player", player.transpose());
        // Stored lowercase (domain/hash.rs): any case the client sends finds it.
        let beatmap_md5 = self.beatmap_md5.as_deref().map(Md5::parse);
        let beatmap_md5 = InvalidParam::collect(
            &mut invalid,
            "beatmap_md5",
            beatmap_md5.transpose().map_err(|e| e.to_string()),
        );
        let after = self.cursor.as_deref().map(PageCursor::decode);
        let after = InvalidParam::collect(
            &mut invalid,
            "cursor",
            after.transpose().map_err(|e| e.to_string()),
        );
        // Each filter shape has its own index (`status`; `player`, `beatmap_md5` or both); a
        // status with a replay filter would scan one index's rows for the other's, a cost that
        // grows with history (said once the filters themselves are well-formed).
        let replay_filter = self.player.is_some() || self.beatmap_md5.is_some();
        if self.status.is_some() && replay_filter && invalid.is_empty() {
            invalid.push(InvalidParam {
                name: if self.player.is_some() {
                    "player"
                } else {
                    "beatmap_md5"
                }
                .into(),
                reason: "`status` filters alone; `player` and `beatmap_md5` go together".into(),
            });
        }
        match (limit, status, player, beatmap_md5, after) {
            (Some(limit), Some(status), Some(player), Some(beatmap_md5), Some(after))
                if invalid.is_empty() =>
            {
                Ok(JobQuery {
                    status,
                    player,
                    beatmap_md5,
                    // The caller's: list_jobs sets it.
                    sandbox: false,
                    limit,
                    after,
                })
            }
            _ => Err(Rejection::InvalidParams(invalid)),
        }
    }
}

/// One page of the caller's jobs. `next` (the next page's path) and `next_cursor` (its
/// `cursor`) are there only when there may be more.
#[derive(Serialize)]
pub struct JobPage {
    items: Vec<JobView>,
    limit: i64,
    /// On the first page: how many of the caller's jobs match the filters, all pages
    /// together: exact up to `TOTAL_CAP`; past it `TOTAL_CAP`, with `total_capped`.
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_capped: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// The path of the page after `cursor`, with the same filters and size.
fn next_path(query: &JobQuery, cursor: &str) -> String {
    let mut path = url::form_urlencoded::Serializer::new(String::new());
    path.append_pair("limit", &query.limit.to_string());
    if let Some(status) = query.status {
        path.append_pair("status", status.as_str());
    }
    if let Some(player) = &query.player {
        path.append_pair("player", player);
    }
    if let Some(md5) = &query.beatmap_md5 {
        path.append_pair("beatmap_md5", md5.as_str());
    }
    path.append_pair("cursor", cursor);
    format!("/v1/jobs?{}", path.finish())
}

/// Both reads count against one generous per-client window.
async fn limit_reads(app: &App, client: &ClientKey) -> Result<Option<RateDecision>, Rejection> {
    check_rate_limit(app, JOBS_ENDPOINT, app.config.rate_limits.read, client).await
}

/// A job as the API shows it.
#[derive(Debug, Serialize)]
pub struct JobView {
    job_id: JobId,
    status: JobStatus,
    progress: f32,
    queue_position: Option<i64>,
    /// When a queued job should start rendering, from the farm model (estimate.rs).
    estimated_start: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    error: Option<String>,
    /// A failed job's code (domain/failure.rs) and whether submitting it again may help; null
    /// unless failed.
    error_code: Option<&'static str>,
    retryable: Option<bool>,
    config: serde_json::Value,
    /// What the replay says (domain/replay/info.rs); null for a job of an earlier release.
    replay: Option<serde_json::Value>,
    artifacts: Option<Artifacts>,
    /// A sandbox key's job: simulated, never rendered (domain/sandbox.rs).
    sandbox: bool,
    /// The client's own label for the job, if it gave one.
    client_reference: Option<String>,
    links: Links,
}

#[derive(Debug, Serialize)]
pub(crate) struct Links {
    #[serde(rename = "self")]
    this: String,
    /// A completed job's artifacts, as paths that redirect to fresh presigned URLs.
    #[serde(skip_serializing_if = "Option::is_none")]
    video: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thumbnail: Option<String>,
    /// Where the job's live events are followed (`EVENTS_URL`), when the deployment has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<String>,
}

impl Links {
    /// The job's links, absolute under `PUBLIC_BASE_URL` when it is set; `events` when the
    /// deployment has live events and `with_events`.
    pub(crate) fn of(config: &Config, job: &JobRecord, with_events: bool) -> Self {
        let completed = job.status == JobStatus::Completed;
        let path = config.http.link(&job.id.status_path());
        let artifact = |key: &Option<String>, noun: &str| {
            key.as_ref()
                .filter(|_| completed)
                .map(|_| format!("{path}/{noun}"))
        };
        Self {
            video: artifact(&job.video_key, "video"),
            thumbnail: artifact(&job.thumb_key, "thumbnail"),
            events: config.http.events_url.clone().filter(|_| with_events),
            this: path,
        }
    }
}

/// Short-lived presigned GET URLs of a completed job's video and thumbnail.
#[derive(Debug, Serialize)]
struct Artifacts {
    video_url: String,
    /// The name `links.thumbnail` matches.
    thumbnail_url: Option<String>,
    /// Deprecated (one release): `thumbnail_url`.
    thumb_url: Option<String>,
    expires_at: DateTime<Utc>,
}

impl JobView {
    /// `artifacts`: the links of `GET /v1/jobs/{id}`; always `None` in a list.
    fn new(app: &App, job: JobRecord, artifacts: Option<Artifacts>) -> Self {
        let links = Links::of(&app.config, &job, true);
        let failure = job.failure();
        Self {
            job_id: job.id,
            status: job.status,
            progress: job.progress,
            queue_position: job.queue_position,
            estimated_start: estimated_start(app, &job),
            created_at: job.created_at,
            updated_at: job.updated_at,
            error: job.error,
            error_code: failure.map(FailureCode::as_str),
            retryable: failure.map(FailureCode::retryable),
            config: job.config,
            replay: job.replay,
            artifacts,
            sandbox: job.sandbox,
            client_reference: job.client_reference,
            links,
        }
    }
}

/// When the farm model (estimate.rs) expects the job to start; `None` unless it is queued.
fn estimated_start(app: &App, job: &JobRecord) -> Option<DateTime<Utc>> {
    let wait = estimate::start_in(&app.config.capacity.farm(), job.wait.as_ref()?);
    Some(Utc::now() + wait)
}

/// A completed job's links.
async fn artifacts_of(app: &App, job: &JobRecord) -> Option<Artifacts> {
    match (job.status, &job.video_key) {
        (JobStatus::Completed, Some(video_key)) => {
            artifacts(app, video_key, job.thumb_key.as_deref()).await
        }
        _ => None,
    }
}

/// Presigning is local work (no request is made); it fails only without credentials, and then
/// the job is shown without artifacts rather than not at all.
async fn artifacts(app: &App, video_key: &str, thumb_key: Option<&str>) -> Option<Artifacts> {
    let ttl = app.config.http.artifact_url_ttl;
    let presigned = async {
        let video_url = presign(app, video_key, ttl).await?;
        let thumb_url = match thumb_key {
            Some(key) => Some(presign(app, key, ttl).await?),
            None => None,
        };
        Ok::<_, String>(Artifacts {
            video_url,
            thumbnail_url: thumb_url.clone(),
            thumb_url,
            expires_at: Utc::now() + ttl,
        })
    };
    presigned
        .await
        .inspect_err(|error| tracing::error!(%error, "could not presign artifact URLs"))
        .ok()
}

async fn presign(app: &App, key: &str, ttl: Duration) -> Result<String, String> {
    app.artifacts
        .link(key, ttl)
        .await
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(limit: Option<&str>, status: Option<&str>, cursor: Option<&str>) -> ListParams {
        ListParams {
            limit: limit.map(str::to_owned),
            status: status.map(str::to_owned),
            cursor: cursor.map(str::to_owned),
            ..ListParams::default()
        }
    }

    #[test]
    fn replay_filters_are_checked() {
        let with = |player: Option<&str>, md5: Option<&str>| ListParams {
            player: player.map(str::to_owned),
            beatmap_md5: md5.map(str::to_owned),
            ..ListParams::default()
        };
        let query = with(Some("Cookiezi"), None).query().unwrap();
        assert_eq!(query.player.as_deref(), Some("Cookiezi"));
        let query = with(Some("\u{202e}Cook\u{200b}iezi"), None)
            .query()
            .unwrap();
        assert_eq!(
            query.player.as_deref(),
            Some("Cookiezi"),
            "as names are stored"
        );
        let query = with(None, Some(&"AB".repeat(16))).query().unwrap();
        assert_eq!(
            query.beatmap_md5.as_ref().map(Md5::as_str),
            Some("ab".repeat(16).as_str()),
            "hex is lowercased"
        );
        for bad in [
            with(Some(""), None),
            with(Some("\u{200b}"), None),
            with(Some(&"x".repeat(65)), None),
        ] {
            assert_eq!(bad.query().unwrap_err().code(), "invalid_field");
        }
        for md5 in ["abc", &"g".repeat(32), &"a".repeat(33)] {
            assert_eq!(
                with(None, Some(md5)).query().unwrap_err().code(),
                "invalid_field"
            );
        }
    }

    #[test]
    fn list_parameters_default_and_are_bounded() {
        assert_eq!(
            params(None, None, None).query().unwrap(),
            JobQuery {
                status: None,
                player: None,
                beatmap_md5: None,
                sandbox: false,
                limit: 20,
                after: None
            }
        );
        let cursor = PageCursor {
            created_at: Utc::now(),
            id: JobId::new(),
        };
        let encoded = cursor.encode();
        let q = params(Some("100"), Some("rendering"), Some(&encoded))
            .query()
            .unwrap();
        assert_eq!(
            (q.limit, q.status, q.after.map(|c| c.id)),
            (100, Some(JobStatus::Rendering), Some(cursor.id))
        );
        let offset = ListParams {
            offset: Some("0".into()),
            ..ListParams::default()
        };
        for (bad, field) in [
            (params(Some("0"), None, None), "limit"),
            (params(Some("101"), None, None), "limit"),
            (params(Some("ten"), None, None), "limit"),
            (params(None, Some("paused"), None), "status"),
            (params(None, None, Some("")), "cursor"),
            (params(None, None, Some("not-a-cursor")), "cursor"),
            (offset, "offset"),
        ] {
            let err = bad.query().unwrap_err();
            assert_eq!(err.code(), "invalid_field");
            assert!(err.detail().starts_with(field), "{}", err.detail());
        }
    }

    #[test]
    fn every_bad_parameter_is_listed_and_the_first_is_the_detail() {
        let bad = ListParams {
            limit: Some("ten".into()),
            status: Some("paused".into()),
            beatmap_md5: Some("abc".into()),
            ..ListParams::default()
        };
        let Err(Rejection::InvalidParams(invalid)) = bad.query() else {
            panic!("refused with every bad parameter")
        };
        let names: Vec<_> = invalid.iter().map(|param| param.name.as_str()).collect();
        assert_eq!(names, ["limit", "status", "beatmap_md5"]);
        assert_eq!(
            bad.query().unwrap_err().detail(),
            format!("limit: {}", invalid[0].reason)
        );
    }

    #[test]
    fn the_next_path_keeps_the_filter_and_size() {
        let query = JobQuery {
            status: Some(JobStatus::Failed),
            player: None,
            beatmap_md5: None,
            sandbox: false,
            limit: 5,
            after: None,
        };
        assert_eq!(
            next_path(&query, "abc"),
            "/v1/jobs?limit=5&status=failed&cursor=abc"
        );
        let query = JobQuery {
            status: None,
            ..query
        };
        assert_eq!(next_path(&query, "abc"), "/v1/jobs?limit=5&cursor=abc");
        let query = JobQuery {
            player: Some("Mr Ekko&co".into()),
            beatmap_md5: Md5::parse("0123456789abcdef0123456789abcdef").ok(),
            sandbox: false,
            ..query
        };
        assert_eq!(
            next_path(&query, "abc"),
            "/v1/jobs?limit=5&player=Mr+Ekko%26co\
             &beatmap_md5=0123456789abcdef0123456789abcdef&cursor=abc"
        );
    }
}
