//! The operator's policy as requests see it: the intake pause and the bans, read in
//! one statement and kept by each instance for `POLICY_CACHE_TTL`, so a change made with
//! `osurender-admin` (admin.rs) reaches every instance within that long and a request costs no
//! database read for it.
//!
//! The cache refreshes at most once per TTL, single-flight: the request that finds the policy
//! stale reads it while the others go on with the stale one (it is at most a refresh older);
//! before the first successful read, requests wait for that read instead, so a cold instance
//! does not admit what a pause would refuse. A failed read keeps the last good policy
//! (**fail-open** on a stale policy: a database blip must not ban everyone or pause the intake)
//! and is tried again `RETRY_AFTER_FAILURE` later, logged as an error. Before any read has
//! succeeded there is no policy to keep, and an empty one would let every banned client
//! through: the request is a 503 `database_unavailable`, as its admission would be anyway.

pub mod admin;
pub mod cache;

use std::future::Future;
use std::sync::Arc;

use chrono::Utc;

use crate::domain::caller::Caller;
use crate::domain::policy::{Ban, Policy};
use crate::support::problem::Rejection;
use crate::usecases::app::App;

/// The instance's policy; none read yet (the database unreachable since it started) is a 503.
pub async fn current_policy(app: &App) -> Result<Arc<Policy>, Rejection> {
    app.policy
        .current()
        .await
        .ok_or(Rejection::DatabaseUnavailable)
}

/// The caller ban of every upload (a render, a skin upload): the caller's
/// address or key banned is a 403, before the form is read and before any quota is spent.
pub async fn check_caller_ban(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let policy = current_policy(app).await?;
    policy
        .caller_ban(caller, Utc::now())
        .map_or(Ok(()), |ban| Err(banned(ban)))
}

/// A render's caller ban with its stateless checks (`steps`): the ban checked first, so with the
/// policy cached a banned address or key reads no form. On an instance that has not read the
/// policy yet (a cold one), the read runs while `steps` do, and a request they refuse is answered
/// without waiting for it: a 400 or a 415 never waits for a database connection (whose first
/// TLS handshake a cold instance pays). A request they pass waits for the read: a 503 when it
/// fails, a 403 when the caller is banned.
pub async fn check_caller_ban_during<T>(
    app: &App,
    caller: &Caller,
    steps: impl Future<Output = Result<T, Rejection>>,
) -> Result<T, Rejection> {
    let ban = check_caller_ban(app, caller);
    tokio::pin!(ban, steps);
    let mut ban_checked = false;
    loop {
        tokio::select! {
            // The ban first: a cached policy answers at once, before the form is touched.
            biased;
            checked = &mut ban, if !ban_checked => {
                checked?;
                ban_checked = true;
            }
            passed = &mut steps => {
                let passed = passed?;
                if !ban_checked {
                    ban.await?;
                }
                return Ok(passed);
            }
        }
    }
}

/// A render's player ban: the replay's player banned is a 403, before any quota is spent.
pub async fn check_player_ban(app: &App, player: &str) -> Result<(), Rejection> {
    let policy = current_policy(app).await?;
    policy
        .player_ban(player, Utc::now())
        .map_or(Ok(()), |ban| Err(banned(ban)))
}

/// A render's intake check: a paused intake is a 503 with the operator's reason (not for a sandbox
/// key, nor, when only anonymous clients are paused, for any key).
pub async fn check_intake_open(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let policy = current_policy(app).await?;
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
