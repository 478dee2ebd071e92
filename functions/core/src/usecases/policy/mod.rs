//! The operator's policy (issue 21) as requests see it: the intake pause and the bans, read in
//! one statement and kept by each instance for `POLICY_CACHE_TTL`, so a change made with
//! `osurender-admin` (admin.rs) reaches every instance within that long and a request costs no
//! database read for it.
//!
//! The cache refreshes at most once per TTL, single-flight: the request that finds the policy
//! stale reads it while the others go on with the stale one (it is at most a refresh older);
//! before the first successful read, requests wait for that read instead, so a cold instance
//! does not admit what a pause would refuse. A failed read keeps the last good policy and is
//! tried again `RETRY_AFTER_FAILURE` later, logged as an error. Before any read has succeeded
//! the policy is empty: **fail-open** — a database outage must not ban everyone or pause the
//! intake, and what the policy shields against is still held back by the rate limits (and an
//! admission needs the database anyway).

pub mod admin;
pub mod cache;

use chrono::Utc;

use crate::domain::caller::Caller;
use crate::domain::policy::Ban;
use crate::support::problem::Rejection;
use crate::usecases::app::App;

/// The ban step of every upload (a render's step 0b, a skin upload's first): the caller's
/// address or key banned is a 403, before the form is read and before any quota is spent.
pub async fn check_caller_ban(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let policy = app.policy.current().await;
    policy
        .caller_ban(caller, Utc::now())
        .map_or(Ok(()), |ban| Err(banned(ban)))
}

/// A render's step 3c: the replay's player banned is a 403, before any quota is spent.
pub async fn check_player_ban(app: &App, player: &str) -> Result<(), Rejection> {
    let policy = app.policy.current().await;
    policy
        .player_ban(player, Utc::now())
        .map_or(Ok(()), |ban| Err(banned(ban)))
}

/// A render's step 5a: a paused intake is a 503 with the operator's reason (not for a sandbox
/// key, nor, when only anonymous clients are paused, for any key).
pub async fn check_intake_open(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let policy = app.policy.current().await;
    match policy.pause_for(caller) {
        Some(pause) => Err(Rejection::RenderJobsPaused {
            reason: pause.reason.as_ref().map(|r| r.as_str().to_owned()),
        }),
        None => Ok(()),
    }
}

fn banned(ban: &Ban) -> Rejection {
    Rejection::Banned {
        reason: ban.reason.as_ref().map(|r| r.as_str().to_owned()),
        until: ban.until,
    }
}

#[cfg(test)]
mod tests;
