//! The built `outbox-dispatcher` under the testkit's Lambda Runtime API, on a fresh migrated
//! database and a wake queue and a render queue of its own on the AWS stand-in, its callbacks
//! received by a route of the test's: the wake queue's SQS event sends the callbacks alone (a
//! pending render event waits for the schedule's `{}`), and after a failed send the function
//! asks its wake queue to wake it when the retry falls due, which that wake then delivers.
//!
//! Needs PostgreSQL where `DATABASE_URL` points and the stand-in where `AWS_ENDPOINT_URL`
//! points, as `./infra/up.sh` starts them.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{Message, QueueAttributeName};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use osurender_core::adapters::postgres::jobs::PgJobStore;
use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::{self as db, migrations, Tls};
use osurender_core::adapters::sqs::SqsWake;
use osurender_core::domain::callback::{self, CallbackUrl, SIGNATURE_HEADER};
use osurender_core::domain::caller::Caller;
use osurender_core::domain::client::ClientKey;
use osurender_core::domain::job::JobId;
use osurender_core::domain::key::{KeyKind, KeyLimits, KeyName, SigningSecret};
use osurender_core::ports::contracts::jobs::{new_job, ROOMY};
use osurender_core::ports::jobs::{Admission, JobAdmission};
use osurender_core::ports::wake::DispatcherWake;
use osurender_core::support::config::DbSslMode;
use osurender_core::usecases::keys;
use osurender_testkit::lambda::{Answer, Function};
use osurender_testkit::stack::{aws_config, aws_endpoint, fresh_queue};
use osurender_testkit::{fresh_database, Database};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(10);

/// The test's callback receiver: what it was sent, and the status it answers with.
struct Receiver {
    status: AtomicU16,
    received: Mutex<Vec<(HeaderMap, Bytes)>>,
}

impl Receiver {
    fn answering(status: StatusCode) -> Arc<Receiver> {
        Arc::new(Receiver {
            status: AtomicU16::new(status.as_u16()),
            received: Mutex::new(Vec::new()),
        })
    }

    fn answer(&self, status: StatusCode) {
        self.status.store(status.as_u16(), Ordering::SeqCst);
    }

    fn received(&self) -> Vec<(HeaderMap, Bytes)> {
        self.received.lock().unwrap().clone()
    }
}

async fn hook(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    receiver.received.lock().unwrap().push((headers, body));
    StatusCode::from_u16(receiver.status.load(Ordering::SeqCst)).unwrap()
}

/// A queue on the stand-in.
struct Queue {
    url: String,
    arn: String,
}

/// The function's process and everything it works on; one job of a key's, with a callback to
/// the receiver, admitted and not yet published.
struct Dispatcher {
    function: Function,
    receiver: Arc<Receiver>,
    sqs: aws_sdk_sqs::Client,
    wake_queue: Queue,
    render_queue: Queue,
    secret: SigningSecret,
    job: JobId,
    /// Last, so the database goes after the function that uses it.
    _database: Database,
}

impl Dispatcher {
    /// `answering`: the receiver's status, until the test changes it.
    async fn start(test: &str, answering: StatusCode) -> Dispatcher {
        let receiver = Receiver::answering(answering);
        let database = fresh_database(&format!("dispatcher_{test}")).await;
        let url = database.url();
        let plain = Tls::new(DbSslMode::Disable, None).unwrap();
        let pg = db::parse_url(&url).unwrap();
        migrations::connect_and_apply(pg.clone(), &plain, TIMEOUT, TIMEOUT, None)
            .await
            .expect("migrations");
        let pool = db::pool(pg, &plain, 1, TIMEOUT).unwrap();

        let sqs = aws_sdk_sqs::Client::new(&aws_config().await);
        let wake_queue = create_queue(&sqs, "wakes").await;
        let render_queue = create_queue(&sqs, "render").await;
        let function = Function::of(env!("CARGO_BIN_EXE_outbox-dispatcher"), "outbox-dispatcher")
            .vars(&[
                ("DATABASE_URL", &url),
                ("DB_SSLMODE", "disable"),
                ("AWS_ENDPOINT_URL", &aws_endpoint()),
                ("RENDER_QUEUE_URL", &render_queue.url),
                ("CALLBACK_WAKE_QUEUE_URL", &wake_queue.url),
                // The receiver is on loopback, over http.
                ("ALLOW_PRIVATE_CALLBACKS", "true"),
            ])
            .routes(
                Router::new()
                    .route("/hook", post(hook))
                    .with_state(receiver.clone()),
            )
            .start(test)
            .await;

        let (kind, limits) = (KeyKind::Live, KeyLimits::default());
        let name = KeyName::parse("wake test").unwrap();
        let key = keys::create(&PgKeyStore::new(pool.clone()), name, kind, limits)
            .await
            .expect("the key is stored");
        let address = ClientKey::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)), 64);
        let caller = Caller::keyed(key.record.summary.id, kind, limits, address);
        let mut job = new_job(&caller, test);
        let hook_url = function.runtime().url("/hook");
        job.callback = Some(CallbackUrl::parse(&hook_url, true).unwrap());
        // No lease of the admission's own on its render event: the next outbox sweep may take
        // it, as after a fast path that failed to publish.
        let jobs = PgJobStore::new(pool, TIMEOUT, Duration::ZERO);
        let admitted = jobs.admit(&job, &ROOMY).await.unwrap();
        assert!(
            matches!(&admitted, Admission::Admitted(events) if events.len() == 1),
            "{admitted:?}"
        );
        Dispatcher {
            function,
            receiver,
            sqs,
            wake_queue,
            render_queue,
            secret: key.record.signing_secret,
            job: job.id,
            _database: database,
        }
    }

    /// The function's report of invocation `request_id` of `event`.
    async fn invoke(&self, request_id: &str, event: Value) -> Value {
        match self.function.invoke(request_id, event, TIMEOUT).await {
            Answer::Response(report) => report,
            other => panic!("{request_id}: {other:?}; log: {}", self.function.log()),
        }
    }

    /// Invocation `request_id` on a wake sent now: its sweep of the callbacks counts
    /// `callbacks` (claimed, dispatched, retried, failed), and it leaves the render events to
    /// the schedule.
    async fn woken(&self, request_id: &str, callbacks: [u64; 4]) {
        let wake = self.wake_now().await;
        let report = self.invoke(request_id, wake).await;
        assert_eq!(counts(&report["callbacks"]), callbacks, "{report}");
        assert_eq!(counts(&report["events"]), [0; 4], "{report}");
    }

    /// A wake sent now by the core's own adapter, as a status change sends it after its
    /// commit, and taken off the wake queue as the SQS event it becomes.
    async fn wake_now(&self) -> Value {
        SqsWake::new(self.sqs.clone(), self.wake_queue.url.clone())
            .wake(Duration::ZERO)
            .await
            .unwrap();
        self.take_wake(TIMEOUT).await
    }

    /// The next wake on the wake queue, taken off it (as the event source does) within
    /// `within`, as the SQS event Lambda hands the function.
    async fn take_wake(&self, within: Duration) -> Value {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(message) = self.receive(&self.wake_queue, 1, 1).await.first() {
                self.sqs
                    .delete_message()
                    .queue_url(&self.wake_queue.url)
                    .receipt_handle(message.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
                return sqs_event(&self.wake_queue, message);
            }
        }
        panic!("no wake within {within:?}")
    }

    /// Up to `max` messages of `queue` (received, not deleted), waiting up to `wait_secs` for
    /// the first.
    async fn receive(&self, queue: &Queue, max: i32, wait_secs: i32) -> Vec<Message> {
        self.sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait_secs)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    }

    /// The messages on `queue`: visible now, and delayed.
    async fn counts(&self, queue: &Queue) -> (u32, u32) {
        let attributes = self
            .sqs
            .get_queue_attributes()
            .queue_url(&queue.url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let count = |name: QueueAttributeName| -> u32 {
            attributes.attributes().unwrap()[&name].parse().unwrap()
        };
        (
            count(QueueAttributeName::ApproximateNumberOfMessages),
            count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        )
    }

    /// The job ids of the render queue's visible messages (received, not deleted).
    async fn rendered_jobs(&self) -> Vec<String> {
        self.receive(&self.render_queue, 10, 0)
            .await
            .iter()
            .map(|message| serde_json::from_str::<Value>(message.body().unwrap()).unwrap())
            .map(|body| body["job_id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A queue of its own, named `<what>-<random>`.
async fn create_queue(sqs: &aws_sdk_sqs::Client, what: &str) -> Queue {
    let url = fresh_queue(sqs, what).await;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    Queue { url, arn }
}

/// The event an SQS event source mapping hands the function for `message` of `queue`.
fn sqs_event(queue: &Queue, message: &Message) -> Value {
    json!({ "Records": [{
        "messageId": message.message_id(),
        "receiptHandle": message.receipt_handle(),
        "body": message.body(),
        "attributes": { "ApproximateReceiveCount": "1" },
        "messageAttributes": {},
        "md5OfBody": message.md5_of_body(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue.arn,
        "awsRegion": "us-east-1"
    }] })
}

/// A sweep's report's counts: (claimed, dispatched, retried, failed).
fn counts(sweep: &Value) -> [u64; 4] {
    ["claimed", "dispatched", "retried", "failed"].map(|field| sweep[field].as_u64().unwrap())
}

#[tokio::test]
async fn a_wake_sends_the_callbacks_alone_and_the_schedule_publishes_the_render_event() {
    let dispatcher = Dispatcher::start("wake_sends", StatusCode::OK).await;
    let receiver = &dispatcher.receiver;
    dispatcher.woken("wake-1", [1, 1, 0, 0]).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    let (headers, body) = &received[0];
    let signature = headers[SIGNATURE_HEADER].to_str().unwrap();
    let timestamp = signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(','))
        .and_then(|(t, _)| t.parse().ok())
        .unwrap_or_else(|| panic!("signature {signature}"));
    assert_eq!(
        signature,
        callback::signature(dispatcher.secret.expose().as_bytes(), timestamp, body),
        "signed with the key's signing secret"
    );
    let body: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(body["job_id"], dispatcher.job.to_string());
    assert_eq!(body["status"], "queued");
    assert_eq!(
        dispatcher.counts(&dispatcher.render_queue).await,
        (0, 0),
        "the render event is left to the schedule"
    );
    assert_eq!(
        dispatcher.counts(&dispatcher.wake_queue).await,
        (0, 0),
        "nothing waits: no wake asked for"
    );

    let report = dispatcher.invoke("schedule-1", json!({})).await;
    assert_eq!(counts(&report["events"]), [1, 1, 0, 0], "{report}");
    assert_eq!(counts(&report["callbacks"]), [0; 4], "{report}");
    assert_eq!(
        dispatcher.rendered_jobs().await,
        [dispatcher.job.to_string()]
    );
    assert_eq!(receiver.received().len(), 1, "the callback went once");
}

#[tokio::test]
async fn after_a_failed_send_the_function_is_woken_when_the_retry_is_due() {
    let dispatcher = Dispatcher::start("wake_retry", StatusCode::INTERNAL_SERVER_ERROR).await;
    let receiver = &dispatcher.receiver;
    dispatcher.woken("wake-1", [1, 0, 1, 0]).await;
    assert_eq!(receiver.received().len(), 1);
    let asked = Instant::now();
    assert_eq!(
        dispatcher.counts(&dispatcher.wake_queue).await,
        (0, 1),
        "one wake, delayed until the retry's backoff ends"
    );

    // The wake arrives when the retry is due (the first backoff: 5 s), and the retry goes out.
    receiver.answer(StatusCode::OK);
    let wake = dispatcher.take_wake(TIMEOUT).await;
    let waited = asked.elapsed();
    assert!(waited >= Duration::from_secs(3), "woken after {waited:?}");
    let report = dispatcher.invoke("wake-2", wake).await;
    assert_eq!(counts(&report["callbacks"]), [1, 1, 0, 0], "{report}");
    assert_eq!(receiver.received().len(), 2);
    assert_eq!(dispatcher.counts(&dispatcher.wake_queue).await, (0, 0));
}
