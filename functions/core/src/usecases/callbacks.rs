//! Callbacks (DESIGN.md §9): a keyed client's `callback_url`, checked at submission, and the
//! dispatcher's sweep that sends the jobs' queued callbacks, signed with the key's secret.
//!
//! The database queues a callback with each status change of a job that has one (the
//! `queue_job_callback` trigger, and admission for the first status or a sandbox job's schedule).
//! The sweep claims only the earliest pending callback of each job, so a job's callbacks arrive in
//! order; a send that fails is retried with the outbox's backoff, and after `OUTBOX_MAX_ATTEMPTS`
//! it is marked failed and the job's next callback goes out. Delivery is at least once: a receiver
//! dedupes by `job_id` and `sequence`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::domain::callback::{self, CallbackUrl, CALLBACK_FIELD};
use crate::domain::caller::Caller;
use crate::ports::callbacks::{
    Callback, CallbackClaim, CallbackSender, KeyShares, SendError, SignedBody,
};
use crate::ports::leased::{LeaseClaim, Retry};
use crate::ports::wake::MAX_WAKE_DELAY;
use crate::ports::StoreError;
use crate::support::config::Config;
use crate::support::metrics;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::outbox::{backoff, SweepReport};
use crate::usecases::request::epoch_secs;

/// Sends in flight at once. Each claim takes at most the free places, so a claimed callback's
/// send begins at once and its lease (`Config::callback_lease`, three send timeouts) covers it.
const MAX_SENDS_IN_FLIGHT: usize = 50;
/// One key's share of a claim: a key whose receivers are all slow (or hostile) holds up its own
/// callbacks, and at most this many of a claim's sends, not everyone's.
pub const CLAIM_PER_KEY: i64 = 10;
/// A new claim is made once this many places are free (or none is in flight): a whole key's
/// share fits, and claims are not made one send at a time.
const CLAIM_WHEN_FREE: usize = CLAIM_PER_KEY as usize;
/// The time after which a sweep claims nothing more that could outlast it: the dispatcher's
/// whole run (its render events beside) stays within its 50 s.
const SWEEP_BUDGET: Duration = Duration::from_secs(30);

/// The submission's `callback_url`, if it has one, checked for form with the other form fields:
/// refused whatever it holds on a deployment that cannot deliver callbacks
/// (`CALLBACKS_EGRESS=false`); else only a keyed client may set one (else the service would send
/// traffic anywhere for anyone), and only an https URL whose host, if an address, is public.
pub fn parse_callback(
    app: &App,
    caller: &Caller,
    text: Option<&str>,
) -> Result<Option<CallbackUrl>, Rejection> {
    let Some(text) = text else {
        return Ok(None);
    };
    if !app.config.callbacks.egress {
        // First: no change to the URL or the caller would make it deliverable.
        return Err(Rejection::CallbacksUnavailable);
    }
    if caller.is_anonymous() {
        return Err(Rejection::ApiKeyRequired(
            "a `callback_url` needs `Authorization: Bearer <key>`: only a client with an API key \
             can set one (without a key, follow the job by its job_id or live events)",
        ));
    }
    let allow_private = app.config.callbacks.allow_private;
    let url =
        CallbackUrl::parse(text, allow_private).map_err(|reason| invalid_callback(&reason))?;
    // An address named literally is checked with the form; a name is looked up after the rate
    // limit (check_callback_host), as the lookup waits on the network.
    match url.literal_address() {
        Some(address) if !allow_private && !callback::is_public(address) => {
            Err(invalid_callback(&"the host is not allowed"))
        }
        _ => Ok(Some(url)),
    }
}

/// The callback host's addresses are all public: looked up after the client's rate limit, as
/// it waits on the network. What the resolver answered stays in the log: told to the client, it
/// would let anyone probe which internal names resolve, and to what. A lookup that failed or
/// timed out is not a refusal: 503 with `Retry-After`, as the answer may be yes.
pub async fn check_callback_host(app: &App, url: &CallbackUrl) -> Result<(), Rejection> {
    app.callback_addresses
        .check(url)
        .await
        .map_err(|error| match error {
            SendError::LookupFailed(_) => {
                tracing::warn!(%error, "callback_url host lookup failed");
                Rejection::CallbackHostUnavailable
            }
            _ => {
                tracing::info!(%error, "callback_url refused");
                invalid_callback(&"the host is not allowed")
            }
        })
}

/// Wakes the dispatcher for a callback just queued (a status change committed): on AWS the
/// callback then goes out within seconds. Best effort: a wake that failed is logged, and the
/// scheduled sweep sends the callback within its period.
pub async fn wake_dispatcher(app: &App) {
    wake_after(app, Duration::ZERO).await;
}

/// After a sweep (`swept`: its report, if it did not fail): asks to be woken at once if it
/// stopped at its time budget with callbacks left, else when the next callback or live-event
/// push (a sandbox job's next step, a lease run out) falls due (a
/// retry's backoff, a sandbox job's next step, a lease that may run out, one that fell due as
/// the sweep ended), when that is within a wake's reach; one due later is the schedule's. A
/// failed read or wake is only logged: the schedule remains.
pub async fn wake_after_sweep(app: &App, swept: Option<&SweepReport>) {
    if app.wake.is_none() {
        return;
    }
    if swept.is_some_and(|report| report.unfinished) {
        return wake_after(app, Duration::ZERO).await;
    }
    let (callback, push) = tokio::join!(
        app.callbacks
            .next_due(app.config.lifecycle.max_delivery_attempts),
        app.pushes.next_due()
    );
    let due = |next: Result<Option<Duration>, StoreError>, what: &str| {
        next.inspect_err(
            |error| tracing::warn!(%error, "reading when the next {what} is due failed"),
        )
        .ok()
        .flatten()
    };
    let next = [due(callback, "callback"), due(push, "live-event push")]
        .into_iter()
        .flatten()
        .min();
    if let Some(after) = next.filter(|after| *after <= MAX_WAKE_DELAY) {
        wake_after(app, after).await;
    }
}

/// A wake is waited for at most this long: it runs in a client's request (a submission, a
/// worker's report), and a slow queue must not hold that up.
const WAKE_WAIT: Duration = Duration::from_secs(1);

async fn wake_after(app: &App, after: Duration) {
    let Some(wake) = &app.wake else {
        return;
    };
    let error = match tokio::time::timeout(WAKE_WAIT, wake.wake(after)).await {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {WAKE_WAIT:?}"),
    };
    tracing::warn!(%error, ?after, "waking the dispatcher failed; the scheduled sweep sends the callbacks");
    metrics::wake_failed();
}

/// The body's `links` (stored as paths) absolute under `PUBLIC_BASE_URL`, as reads show them.
fn with_absolute_links(config: &Config, mut body: serde_json::Value) -> serde_json::Value {
    if let Some(links) = body
        .get_mut("links")
        .and_then(|links| links.as_object_mut())
    {
        for link in links.values_mut() {
            if let Some(path) = link.as_str() {
                *link = serde_json::Value::String(config.http.link(path));
            }
        }
    }
    body
}

fn invalid_callback(reason: &dyn std::fmt::Display) -> Rejection {
    Rejection::InvalidField(format!("{CALLBACK_FIELD}: {reason}"))
}

/// How one claimed callback's send came out.
enum Sent {
    Delivered(i64),
    Retry(Retry),
    /// Cannot succeed however often it is tried (the key is revoked): failed now.
    GiveUp(Retry),
}

/// The dispatcher's callback work: keeps up to `MAX_SENDS_IN_FLIGHT` sends going, each a task
/// of its own that marks its callback as soon as its send ends, and claims again whenever
/// enough places are free, until a claim finds nothing and no send is left, or `SWEEP_BUDGET`
/// is spent. A slow receiver holds only its own place: the next claim does not wait for it.
/// Claiming again after sends end also takes each job's next callback, so a job's backlog drains
/// in one sweep. A failed claim or mark is logged and counted, and the sends in flight are still
/// drained and marked; no claim follows a failed claim, and the sweep then answers the first
/// error, with how many there were.
pub async fn sweep(app: &App, sender: &Arc<dyn CallbackSender>) -> Result<SweepReport, StoreError> {
    let mut report = SweepReport::default();
    let started = Instant::now();
    let mut in_flight = JoinSet::new();
    let mut errors = SweepErrors::default();
    loop {
        let free = MAX_SENDS_IN_FLIGHT - in_flight.len();
        let may_claim = started.elapsed() + app.config.callbacks.timeout <= SWEEP_BUDGET
            && !errors.claim_failed;
        if may_claim && (free >= CLAIM_WHEN_FREE || in_flight.is_empty()) {
            let claimed = app
                .callbacks
                .claim(CallbackClaim {
                    lease: LeaseClaim {
                        limit: free as i64,
                        lease: app.config.callback_lease(),
                        max_attempts: app.config.lifecycle.max_delivery_attempts,
                    },
                    shares: KeyShares {
                        per_client: CLAIM_PER_KEY,
                        max_pending_per_key: app.config.callbacks.max_pending_per_key,
                    },
                })
                .await;
            match claimed {
                Ok(claimed) => {
                    report.claimed += claimed.len() as u64;
                    for callback in claimed {
                        in_flight.spawn(send_and_mark(app.clone(), sender.clone(), callback));
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "callback claim failed; draining the sends in flight");
                    errors.claim_failed = true;
                    errors.note(error);
                }
            }
        }
        // Claims again once a send ends: its job's next callback may be due now.
        match in_flight.join_next().await {
            Some(Ok(Ok(outcome))) => report += outcome,
            Some(Ok(Err(error))) => {
                tracing::error!(%error, "a callback's mark failed; it is sent again after its lease");
                errors.note(error);
            }
            Some(Err(error)) => errors.note(StoreError::new(format!("a send: {error}"))),
            // Nothing in flight after a claim was due: it found none, failed, or the budget is
            // spent.
            None => break,
        }
    }
    // Claims stopped for the budget: callbacks may be left, or have fallen due as the last
    // sends ended (their jobs' next ones).
    report.unfinished = started.elapsed() + app.config.callbacks.timeout > SWEEP_BUDGET;
    match errors.first {
        None => Ok(report),
        Some(first) => {
            tracing::error!(
                ?report,
                failures = errors.count,
                "callback sweep ended with failures"
            );
            Err(StoreError::new(format!(
                "{} of the callback sweep's claims and marks failed; the first: {first}",
                errors.count
            )))
        }
    }
}

/// A sweep's failed claims and marks: how many, and the first.
#[derive(Default)]
struct SweepErrors {
    first: Option<StoreError>,
    count: u64,
    claim_failed: bool,
}

impl SweepErrors {
    fn note(&mut self, error: StoreError) {
        self.count += 1;
        self.first.get_or_insert(error);
    }
}

/// Sends one claimed callback and records how that went, at once.
async fn send_and_mark(
    app: App,
    sender: Arc<dyn CallbackSender>,
    callback: Callback,
) -> Result<SweepReport, StoreError> {
    let max_attempts = app.config.lifecycle.max_delivery_attempts;
    let failed = match send(&app, sender.as_ref(), &callback).await {
        Sent::Delivered(id) => {
            app.callbacks.mark_dispatched(&[id]).await?;
            return Ok(SweepReport {
                dispatched: 1,
                ..SweepReport::default()
            });
        }
        Sent::Retry(retry) => app.callbacks.mark_retry(&[retry], max_attempts).await?,
        Sent::GiveUp(retry) => app.callbacks.mark_failed(retry).await?,
    };
    Ok(SweepReport {
        retried: 1 - failed,
        failed,
        ..SweepReport::default()
    })
}

/// Signs and sends one callback. The URL is parsed again under today's settings, and the
/// sender checks its addresses again as it connects.
async fn send(app: &App, sender: &dyn CallbackSender, callback: &Callback) -> Sent {
    let retry = |error: String| Retry {
        id: callback.id,
        delay: backoff(callback.attempts),
        error,
    };
    let Some(secret) = &callback.signing_secret else {
        return Sent::GiveUp(retry("the job's API key is revoked".into()));
    };
    let url = match CallbackUrl::parse(&callback.url, app.config.callbacks.allow_private) {
        Ok(url) => url,
        Err(reason) => return Sent::GiveUp(retry(format!("callback_url: {reason}"))),
    };
    let body = with_absolute_links(&app.config, callback.body.clone());
    let body = serde_json::to_vec(&body).expect("JSON values serialize");
    let signature = callback::signature(secret.expose().as_bytes(), epoch_secs(), &body);
    match sender.send(&url, SignedBody { body, signature }).await {
        Ok(()) => Sent::Delivered(callback.id),
        Err(error) => {
            tracing::warn!(
                callback_id = callback.id,
                job_id = %callback.job_id,
                sequence = callback.sequence,
                attempts = callback.attempts,
                %error,
                "callback not delivered"
            );
            // A refused address too: DNS may answer otherwise later, and if not, the
            // attempts run out.
            Sent::Retry(retry(error.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::adapters::memory::{Memory, MemoryCallbacks};
    use crate::domain::client::ClientKey;
    use crate::domain::job::JobId;
    use crate::domain::key::{KeyId, KeyKind, KeyLimits, SigningSecret};
    use crate::support::config::Config;

    fn app() -> (App, Memory) {
        App::in_memory(Config::from_lookup(|_| None).unwrap())
    }

    fn address() -> ClientKey {
        ClientKey::new(IpAddr::from([203, 0, 113, 9]), 64)
    }

    fn callback(id: i64, job: JobId, sequence: i32, secret: Option<&SigningSecret>) -> Callback {
        Callback {
            id,
            job_id: job,
            sequence,
            url: "https://bot.example/hook".into(),
            body: serde_json::json!({ "job_id": job, "sequence": sequence }),
            attempts: 0,
            signing_secret: secret.cloned(),
        }
    }

    #[tokio::test]
    async fn only_a_keyed_client_with_a_public_url_sets_a_callback() {
        let (app, _) = app();
        let anonymous = Caller::anonymous(address(), address(), address());
        let keyed = Caller::keyed(KeyId::new(), KeyKind::Live, KeyLimits::default(), address());
        assert_eq!(parse_callback(&app, &keyed, None), Ok(None));
        let refused = parse_callback(&app, &anonymous, Some("https://bot.example/"));
        assert!(
            matches!(refused, Err(Rejection::ApiKeyRequired(_))),
            "{refused:?}"
        );
        let refused = parse_callback(&app, &keyed, Some("http://bot.example/"));
        assert!(matches!(refused, Err(Rejection::InvalidField(_))));
        // A private address named literally is refused with the form, before any lookup.
        for url in [
            "https://10.1.1.1/",
            "https://[::1]/",
            "https://[2001:db8::1]/",
        ] {
            let refused = parse_callback(&app, &keyed, Some(url));
            assert_eq!(
                refused,
                Err(Rejection::InvalidField(
                    "callback_url: the host is not allowed".into()
                )),
                "{url}"
            );
        }
        let accepted = parse_callback(&app, &keyed, Some("https://bot.example/hook"))
            .unwrap()
            .unwrap();
        assert_eq!(accepted.as_str(), "https://bot.example/hook");
        assert_eq!(check_callback_host(&app, &accepted).await, Ok(()));
    }

    #[tokio::test]
    async fn a_host_lookup_that_fails_is_unavailable_not_refused() {
        let (app, memory) = app();
        let url = CallbackUrl::parse("https://bot.example/hook", false).unwrap();
        memory.callbacks.set_lookups_failing(true);
        let unknown = check_callback_host(&app, &url).await.unwrap_err();
        assert_eq!(unknown, Rejection::CallbackHostUnavailable);
        assert_eq!(
            unknown.status(),
            axum::http::StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(unknown.code(), "callback_host_unavailable");
        assert!(unknown.retry_after().is_some());
        memory.callbacks.set_lookups_failing(false);
        assert_eq!(check_callback_host(&app, &url).await, Ok(()));
    }

    /// The memory sender, but a send to a URL with `slow` in it takes `SLOW`.
    struct SlowFor(Arc<MemoryCallbacks>);
    const SLOW: Duration = Duration::from_millis(1500);

    #[async_trait::async_trait]
    impl CallbackSender for SlowFor {
        async fn send(&self, url: &CallbackUrl, signed: SignedBody) -> Result<(), SendError> {
            if url.as_str().contains("slow") {
                tokio::time::sleep(SLOW).await;
            }
            self.0.send(url, signed).await
        }
    }

    #[tokio::test]
    async fn a_slow_receiver_does_not_hold_up_the_next_claim() {
        let (app, memory) = app();
        let secret = SigningSecret::generate().unwrap();
        let (slow, quick) = (JobId::new(), JobId::new());
        let mut slow_callback = callback(1, slow, 1, Some(&secret));
        slow_callback.url = "https://slow.example/hook".into();
        memory.callbacks.push(slow_callback);
        // Each of the quick job's callbacks is due only once the one before is delivered: a
        // claim apiece, all while the slow send is still going.
        for sequence in 1..=3 {
            memory.callbacks.push(callback(
                1 + i64::from(sequence),
                quick,
                sequence,
                Some(&secret),
            ));
        }
        let sender: Arc<dyn CallbackSender> = Arc::new(SlowFor(memory.callbacks.clone()));
        let started = Instant::now();
        let sweeping = sweep(&app, &sender);
        tokio::pin!(sweeping);
        let quick_sent = async {
            while memory.callbacks.sent().len() < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            started.elapsed()
        };
        let quick_took = tokio::select! {
            took = quick_sent => took,
            _ = &mut sweeping => panic!("the sweep ended before the quick callbacks were sent"),
        };
        assert!(quick_took < SLOW / 2, "the quick job waited {quick_took:?}");
        let report = sweeping.await.unwrap();
        assert_eq!((report.claimed, report.dispatched), (4, 4));
        assert!(started.elapsed() >= SLOW);
        let urls: Vec<String> = memory
            .callbacks
            .sent()
            .into_iter()
            .map(|(url, ..)| url)
            .collect();
        assert_eq!(
            urls.last().map(String::as_str),
            Some("https://slow.example/hook")
        );
    }

    #[tokio::test]
    async fn after_a_sweep_the_dispatcher_asks_to_be_woken_when_the_next_callback_falls_due() {
        let (app, memory) = app();
        let sender: Arc<dyn CallbackSender> = memory.callbacks.clone();
        let secret = SigningSecret::generate().unwrap();
        wake_after_sweep(&app, None).await;
        assert!(memory.wake.asked().is_empty(), "nothing waits: no wake");
        memory
            .callbacks
            .push(callback(1, JobId::new(), 1, Some(&secret)));
        wake_after_sweep(&app, None).await;
        assert_eq!(
            memory.wake.asked(),
            [Duration::ZERO],
            "one that just fell due (after a sweep's last claim) is swept at once"
        );
        assert_eq!(memory.wake.take_due(), 1);

        memory.callbacks.set_down(true);
        assert_eq!(sweep(&app, &sender).await.unwrap().retried, 1);
        wake_after_sweep(&app, None).await;
        let asked = memory.wake.asked();
        assert_eq!(asked.len(), 1, "{asked:?}");
        let backoff = backoff(1);
        assert!(
            asked[0] > backoff - Duration::from_secs(1) && asked[0] <= backoff,
            "woken when the retry's backoff ends: {asked:?}"
        );

        // A wake that cannot be sent is only logged: the schedule remains.
        memory.wake.set_down(true);
        wake_after_sweep(&app, None).await;
        wake_dispatcher(&app).await;
        assert_eq!(memory.wake.asked().len(), 1);

        // Delivered: nothing waits, so no wake.
        memory.wake.set_down(false);
        memory.callbacks.set_down(false);
        memory.callbacks.make_due();
        assert_eq!(sweep(&app, &sender).await.unwrap().dispatched, 1);
        wake_after_sweep(&app, None).await;
        assert_eq!(memory.wake.asked().len(), 1);

        // A sweep cut short by its time budget, its last claim not empty: swept again at once.
        let cut_short = SweepReport {
            claimed: 50,
            unfinished: true,
            ..SweepReport::default()
        };
        wake_after_sweep(&app, Some(&cut_short)).await;
        assert_eq!(memory.wake.asked().last(), Some(&Duration::ZERO));
    }

    #[tokio::test]
    async fn a_later_callback_behind_a_send_in_flight_is_not_due_until_its_lease_ends() {
        let (app, memory) = app();
        let secret = SigningSecret::generate().unwrap();
        let job = JobId::new();
        memory.callbacks.push(callback(1, job, 1, Some(&secret)));
        memory.callbacks.push(callback(2, job, 2, Some(&secret)));
        let lease = Duration::from_secs(60);
        let claim = CallbackClaim {
            lease: LeaseClaim {
                limit: 10,
                lease,
                max_attempts: 10,
            },
            shares: KeyShares {
                per_client: 10,
                max_pending_per_key: 100,
            },
        };
        let claimed = app.callbacks.claim(claim).await.unwrap();
        assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [1]);
        let next = app.callbacks.next_due(10).await.unwrap();
        assert!(
            next.is_some_and(|left| left > lease - Duration::from_secs(5) && left <= lease),
            "the second waits for the first's lease: {next:?}"
        );
        wake_after_sweep(&app, None).await;
        assert_ne!(memory.wake.asked(), [Duration::ZERO], "no wake for it now");
        app.callbacks.mark_dispatched(&[1]).await.unwrap();
        assert_eq!(
            app.callbacks.next_due(10).await.unwrap(),
            Some(Duration::ZERO)
        );
    }

    #[tokio::test]
    async fn a_failed_mark_does_not_cancel_the_other_sends() {
        let (app, memory) = app();
        let secret = SigningSecret::generate().unwrap();
        let mut slow = callback(1, JobId::new(), 1, Some(&secret));
        slow.url = "https://slow.example/hook".into();
        memory.callbacks.push(slow);
        memory
            .callbacks
            .push(callback(2, JobId::new(), 1, Some(&secret)));
        memory.callbacks.fail_mark_of(2);
        let sender: Arc<dyn CallbackSender> = Arc::new(SlowFor(memory.callbacks.clone()));
        let error = sweep(&app, &sender).await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("1 of the callback sweep's claims and marks failed"),
            "{error}"
        );
        // The slow send, in flight when the quick one's mark failed, went out and was marked.
        assert_eq!(memory.callbacks.sent().len(), 2);
        assert_eq!(
            memory.callbacks.statuses(),
            [(1, "Dispatched".to_owned()), (2, "Pending".to_owned())]
        );
    }

    #[tokio::test]
    async fn a_sweep_sends_each_jobs_callbacks_in_order_signed_and_retries_or_gives_up() {
        let (app, memory) = app();
        let sender: Arc<dyn CallbackSender> = memory.callbacks.clone();
        let secret = SigningSecret::generate().unwrap();
        let (a, b, c) = (JobId::new(), JobId::new(), JobId::new());
        memory.callbacks.push(callback(1, a, 1, Some(&secret)));
        memory.callbacks.push(callback(2, a, 2, Some(&secret)));
        memory.callbacks.push(callback(3, b, 1, None));
        let report = sweep(&app, &sender).await.unwrap();
        assert_eq!((report.dispatched, report.failed), (2, 1));
        let sent = memory.callbacks.sent();
        let sequences: Vec<_> = sent
            .iter()
            .map(|(_, body, _)| serde_json::from_slice::<serde_json::Value>(body).unwrap())
            .map(|body| body["sequence"].as_i64().unwrap())
            .collect();
        assert_eq!(sequences, [1, 2]);
        for (_, body, signature) in &sent {
            let t: u64 = signature[2..signature.find(',').unwrap()].parse().unwrap();
            let expected = callback::signature(secret.expose().as_bytes(), t, body);
            assert_eq!(signature, &expected);
        }
        let statuses = memory.callbacks.statuses();
        assert_eq!(
            statuses,
            [
                (1, "Dispatched".into()),
                (2, "Dispatched".into()),
                (3, "Failed".into())
            ]
        );

        // A receiver that does not answer: retried after its backoff, then delivered.
        memory.callbacks.push(callback(4, c, 1, Some(&secret)));
        memory.callbacks.set_down(true);
        let report = sweep(&app, &sender).await.unwrap();
        assert_eq!(
            (report.claimed, report.retried, report.dispatched),
            (1, 1, 0)
        );
        memory.callbacks.set_down(false);
        assert_eq!(
            sweep(&app, &sender).await.unwrap().claimed,
            0,
            "backing off"
        );
        memory.callbacks.make_due();
        assert_eq!(sweep(&app, &sender).await.unwrap().dispatched, 1);
    }
}
