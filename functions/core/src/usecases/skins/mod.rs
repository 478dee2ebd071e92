//! Skins: which ones can be rendered with (`GET /v1/skins`), uploads (`POST /v1/skins/upload`,
//! and the legacy `POST /skins/upload`, which counts its rate limit separately), presigned
//! uploads of large skins and their ingest.
//!
//! Read `upload` for the admission steps, `archive` for what a valid skin is, `store` for where
//! skins live and how a name is claimed race-free, `ingest` for presigned uploads' arrival.

pub mod admin;
pub mod ingest;
pub mod upload;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;

use crate::domain::client::ClientKey;
use crate::domain::page;
use crate::domain::render::SkinName;
use crate::ports::StoreError;
use crate::support::problem::{InvalidParam, Rejection};
use crate::usecases::app::App;
use crate::usecases::request::{check_rate_limit, Submission};

pub use ingest::{ingest, ingest_pending, IngestError, IngestOutcome};
pub use upload::{UploadRoute, DEFAULT_SKIN};

/// The limiter's endpoint name of `GET /v1/skins`.
pub const LIST_ENDPOINT: &str = "skins";

/// Most names a page of `GET /v1/skins` holds (`limit`), and its default: one Postgres index
/// range of at most this many rows per request.
pub const MAX_PAGE: usize = 1000;

/// Which page of the listing: the names after the cursor's, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    after: Option<String>,
    limit: usize,
}

impl PageRequest {
    /// `cursor`: a page's `next`, as given; `limit`: 1..=`MAX_PAGE`, default `MAX_PAGE`.
    /// Both are checked: a refusal lists every bad one (`invalid_params`).
    pub fn parse(cursor: Option<&str>, limit: Option<&str>) -> Result<Self, Rejection> {
        let mut invalid = Vec::new();
        let limit = page::limit(limit, MAX_PAGE, MAX_PAGE);
        let limit = InvalidParam::collect(&mut invalid, "limit", limit);
        let after = cursor.map(|cursor| {
            URL_SAFE_NO_PAD
                .decode(cursor)
                .ok()
                .filter(|name| (1..=SkinName::MAX_LEN).contains(&name.len()))
                .and_then(|name| String::from_utf8(name).ok())
                .ok_or_else(|| "not a cursor this listing gave".to_owned())
        });
        let after = InvalidParam::collect(&mut invalid, "cursor", after.transpose());
        match (limit, after) {
            (Some(limit), Some(after)) if invalid.is_empty() => Ok(Self { after, limit }),
            _ => Err(Rejection::InvalidParams(invalid)),
        }
    }
}

/// A render's skin: built in, or stored in the registry (in any case, as names compare), else a
/// 422 `unknown_skin` rather than a job its worker would fail. One point read of the registry's
/// unique index on the folded name; the built-in skin costs none. An upload still running
/// (`Held`) is not a skin yet, nor is one the operator removed (`NameState::renderable`).
pub async fn check_renderable(app: &App, skin: &SkinName) -> Result<(), Rejection> {
    if skin.is_default() {
        return Ok(());
    }
    match app.skin_names.state(skin).await {
        Ok(state) if state.renderable() => Ok(()),
        Ok(_) => Err(Rejection::UnknownSkin(format!(
            "skin: no skin is named `{}`; GET /v1/skins lists the skins a render may name \
             (upload one first)",
            skin.as_str()
        ))),
        Err(error) => Err(lookup_failed(error)),
    }
}

/// A skin name lookup that failed: the registry is Postgres, so 503 (logged).
pub(super) fn lookup_failed(error: StoreError) -> Rejection {
    error.into_rejection("skin name lookup")
}

/// One page of the skins a render may name, in byte order. `next` is the cursor of the page
/// after it, or `None` on the last page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkinPage {
    pub skins: Vec<String>,
    pub next: Option<String>,
}

/// A page of the skins a render may name: the stored names of the registry (keyset on the
/// name), with `Default` in its place in the order.
pub async fn list_skins(app: &App, client: &ClientKey, page: &PageRequest) -> Submission<SkinPage> {
    let rate = match check_rate_limit(app, LIST_ENDPOINT, app.config.rate_limits.read, client).await
    {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let after = page.after.as_deref().unwrap_or_default();
    let outcome = app
        .skin_names
        .list(after, page.limit + 1)
        .await
        .map(|names| paged(names, after, page.limit))
        .map_err(|error| error.into_rejection("listing skins"));
    Submission { outcome, rate }
}

/// `names` (sorted, after `after`, one more than `limit` if there are more) as a page, with
/// `Default` added when its place is within the page: after `after`, and before the page's
/// last name unless this is the last page.
fn paged(mut names: Vec<String>, after: &str, limit: usize) -> SkinPage {
    let more = names.len() > limit;
    names.truncate(limit);
    let next = match names.last() {
        Some(last) if more => Some(URL_SAFE_NO_PAD.encode(last)),
        _ => None,
    };
    let ends_after_default = names
        .last()
        .is_some_and(|last| last.as_str() > DEFAULT_SKIN);
    if after < DEFAULT_SKIN && (!more || ends_after_default) {
        if let Err(at) = names.binary_search_by(|name| name.as_str().cmp(DEFAULT_SKIN)) {
            names.insert(at, DEFAULT_SKIN.to_owned());
        }
    }
    SkinPage { skins: names, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn default_takes_its_place_on_exactly_one_page() {
        let all = names(&["A", "Cool", "Dark", "Zed", "a b", "zz"]);
        for limit in 1..=7 {
            let mut listed = Vec::new();
            let mut after = String::new();
            loop {
                let rest: Vec<String> = all
                    .iter()
                    .filter(|name| name.as_str() > after.as_str())
                    .take(limit + 1)
                    .cloned()
                    .collect();
                let page = paged(rest, &after, limit);
                assert!(page.skins.len() <= limit + 1);
                listed.extend(page.skins);
                match page.next {
                    Some(next) => {
                        let request =
                            PageRequest::parse(Some(&next), Some(&limit.to_string())).unwrap();
                        after = request.after.unwrap();
                    }
                    None => break,
                }
            }
            let mut expected = all.clone();
            expected.push(DEFAULT_SKIN.into());
            expected.sort();
            assert_eq!(listed, expected, "limit {limit}");
        }
        assert_eq!(
            paged(Vec::new(), "", 10),
            SkinPage {
                skins: names(&["Default"]),
                next: None
            }
        );
    }

    #[test]
    fn pages_are_bounded_and_cursors_checked() {
        assert!(PageRequest::parse(None, None).is_ok());
        for limit in ["0", &(MAX_PAGE + 1).to_string(), "ten"] {
            assert_eq!(
                PageRequest::parse(None, Some(limit)).unwrap_err().code(),
                "invalid_field"
            );
        }
        let both = PageRequest::parse(Some("%%%"), Some("ten")).unwrap_err();
        let Rejection::InvalidParams(invalid) = &both else {
            panic!("{both:?}")
        };
        let names: Vec<_> = invalid.iter().map(|param| param.name.as_str()).collect();
        assert_eq!(names, ["limit", "cursor"]);
        assert_eq!(both.detail(), format!("limit: must be 1 to {MAX_PAGE}"));
        let too_long = URL_SAFE_NO_PAD.encode("x".repeat(SkinName::MAX_LEN + 1));
        for cursor in ["%%%", "", "_w", too_long.as_str()] {
            assert_eq!(
                PageRequest::parse(Some(cursor), None).unwrap_err().code(),
                "invalid_field",
                "{cursor}"
            );
        }
    }
}
