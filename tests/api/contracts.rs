//! The ports' contract suites (core `ports/contracts/`) against the real adapters: the same
//! guarantees the in-memory fakes are held to in the core's unit tests.

use std::time::Duration;

use bytes::Bytes;

use osurender_core::adapters::callback_sender::{CheckedAddresses, HttpCallbacks};
use osurender_core::adapters::dynamo::DynamoRateLimiter;
use osurender_core::adapters::dynamo_events::DynamoConnections;
use osurender_core::adapters::management_api::ManagementApiPusher;
use osurender_core::adapters::postgres::callbacks::PgCallbackStore;
use osurender_core::adapters::postgres::idempotency::PgIdempotencyStore;
use osurender_core::adapters::postgres::jobs::PgJobStore;
use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::outbox::PgOutboxStore;
use osurender_core::adapters::postgres::policy::PgPolicyStore;
use osurender_core::adapters::postgres::pushes::PgPushQueue;
use osurender_core::adapters::postgres::skins::PgSkinRegistry;
use osurender_core::adapters::replay_fetch::HttpReplays;
use osurender_core::adapters::s3::{S3Bucket, S3SkinStore};
use osurender_core::adapters::secrets::SecretsManagerStore;
use osurender_core::adapters::sqs::{SqsRenderQueue, SqsWake};
use osurender_core::domain::callback::CallbackUrl;
use osurender_core::domain::events::ConnectionId;
use osurender_core::ports::callbacks::{CallbackClaim, KeyShares};
use osurender_core::ports::contracts;
use osurender_core::ports::events::{PushError, Pusher};
use osurender_core::ports::jobs::{Admission, JobAdmission};
use osurender_core::ports::skins::CLAIM_STALE_AFTER;
use osurender_core::Clients;

use crate::support::app::{wake_queue, TestApp};

#[tokio::test]
async fn the_dynamodb_limiter_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let limiter =
        DynamoRateLimiter::new(clients.dynamodb.clone(), &app.config.aws.rate_limit_table);
    contracts::limiter::suite(&limiter).await;
}

#[tokio::test]
async fn the_postgres_key_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::keys::suite(&PgKeyStore::new(clients.pool.clone())).await;
}

#[tokio::test]
async fn the_postgres_policy_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::policy::suite(&PgPolicyStore::new(clients.pool.clone())).await;
}

#[tokio::test]
async fn the_postgres_idempotency_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::idempotency::suite(&PgIdempotencyStore::new(clients.pool.clone())).await;
}

#[tokio::test]
async fn the_postgres_skin_registry_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let registry = PgSkinRegistry::new(clients.pool.clone(), CLAIM_STALE_AFTER);
    contracts::skin_names::suite(&registry).await;
}

fn jobs_of(clients: &Clients) -> PgJobStore {
    PgJobStore::new(
        clients.pool.clone(),
        Duration::from_secs(5),
        Duration::from_secs(30),
    )
}

#[tokio::test]
async fn the_postgres_push_queue_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let pushes = PgPushQueue::new(clients.pool.clone());
    contracts::pushes::suite(&pushes, &jobs_of(&clients)).await;
}

#[tokio::test]
async fn the_postgres_job_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::jobs::suite(&jobs_of(&clients)).await;
}

#[tokio::test]
async fn the_postgres_job_store_keeps_the_fair_release_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::release::suite(&jobs_of(&clients)).await;
}

#[tokio::test]
async fn the_postgres_outbox_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let jobs = jobs_of(&clients);
    let seed = async || contracts::leased::seed_event(&jobs).await;
    let outbox = PgOutboxStore::new(clients.pool.clone());
    contracts::leased::suite(&outbox, |lease| lease, seed).await;
}

#[tokio::test]
async fn the_postgres_callback_queue_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let jobs = jobs_of(&clients);
    // A job with a callback URL: admit_job queues its first callback.
    let seed = async || {
        let mut job = contracts::jobs::new_job(&contracts::fresh_caller(), "with a callback");
        job.callback = Some(CallbackUrl::parse("https://example.com/hook", false).unwrap());
        let admitted = jobs.admit(&job, &contracts::jobs::ROOMY).await.unwrap();
        assert!(matches!(admitted, Admission::Admitted(_)), "{admitted:?}");
        app.scalar_with::<i64>(
            "SELECT id FROM job_callbacks WHERE job_id = $1::text::uuid",
            &[&job.id.to_string()],
        )
        .await
    };
    let shares = KeyShares {
        per_client: 1000,
        max_pending_per_key: 1000,
    };
    let callbacks = PgCallbackStore::new(clients.pool.clone());
    contracts::leased::suite(&callbacks, |lease| CallbackClaim { lease, shares }, seed).await;
}

#[tokio::test]
async fn the_sqs_wake_keeps_the_ports_contract() {
    let url = wake_queue().await;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let wake = SqsWake::new(sqs.clone(), url.clone());
    // As the dispatcher's event source: what is received is deleted.
    let take_due = async || {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        for message in received.messages() {
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
        received.messages().len()
    };
    contracts::wake::suite(&wake, take_due).await;
}

#[tokio::test]
async fn the_callback_address_check_and_sender_keep_the_ports_contract() {
    contracts::callbacks::addresses(&CheckedAddresses {
        allow_private: false,
    })
    .await;
    contracts::callbacks::sender(&HttpCallbacks::new(Duration::from_secs(3), false)).await;
}

/// The HTTP replay fetch against a loopback server (the development switch lets it reach
/// loopback); the guard's refusals are tests/api/replay_url.rs'.
#[tokio::test]
async fn the_http_replay_fetch_keeps_the_ports_contract() {
    use axum::routing::get;
    let body = bytes::Bytes::from_static(b"a replay");
    let served_body = body.clone();
    let router = axum::Router::new()
        .route("/a.osr", get(move || async move { served_body.clone() }))
        .route("/big", get(|| async { vec![0u8; 4000] }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let served = contracts::replay_urls::Served {
        ok: format!("http://{addr}/a.osr"),
        body,
        big: format!("http://{addr}/big"),
        missing: format!("http://{addr}/missing"),
    };
    let fetcher = HttpReplays::new(Duration::from_secs(3), true);
    contracts::replay_urls::suite(&fetcher, &served).await;
}

#[tokio::test]
async fn the_s3_object_stores_keep_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let (s3, config) = (&clients.s3, &app.config);
    let exists = async |key: &str| {
        let head = s3.head_object().bucket(&config.aws.replay_bucket).key(key);
        head.send().await.is_ok()
    };
    let replays = S3Bucket::new(s3.clone(), &config.aws.replay_bucket);
    contracts::objects::replays(&replays, exists).await;
    let place = async |key: &str, body: Bytes| {
        let put = s3.put_object().bucket(&config.aws.skin_bucket).key(key);
        put.body(body.into()).send().await.unwrap();
    };
    let skins = S3SkinStore::new(s3.clone(), clients.sdk.clone(), &config.aws.skin_bucket);
    contracts::objects::skins(&skins, place).await;
    let links = S3Bucket::new(s3.clone(), &config.aws.artifact_bucket);
    contracts::artifacts::suite(&links).await;
}

#[tokio::test]
async fn the_sqs_render_queue_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let queue = SqsRenderQueue::new(clients.sqs.clone(), None, &app.queue);
    contracts::queue::suite(&queue).await;
    assert_eq!(
        app.drain_queue().await.len(),
        23,
        "what was sent is on the queue"
    );
}

#[tokio::test]
async fn the_secrets_manager_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let manager = &clients.secretsmanager;
    let put = async |id: &str, value: &str| {
        let rotated = manager
            .put_secret_value()
            .secret_id(id)
            .secret_string(value);
        if rotated.send().await.is_err() {
            let create = manager.create_secret().name(id).secret_string(value);
            create.send().await.expect("created");
        }
    };
    let secrets = SecretsManagerStore::new(manager.clone());
    contracts::secrets::suite(&secrets, put).await;
}

#[tokio::test]
async fn the_dynamodb_connection_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    // The dev server made the table at start, as template.yaml makes it on AWS.
    let store = DynamoConnections::new(clients.dynamodb.clone(), &app.config.aws.events_table);
    contracts::connections::suite(&store).await;
}

/// A stand-in for API Gateway's Management API, held to its documented answers: `POST
/// /@connections/{id}` is 200 for an open connection, 410 `GoneException` for one that is not,
/// 403 `ForbiddenException` for a caller without the right (here: ids starting `forbidden`),
/// 413 `PayloadTooLargeException` over 128 KiB. moto does not serve this API.
mod management_api {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use axum::Router;

    #[derive(Default)]
    pub struct Fake {
        pub open: Mutex<HashSet<String>>,
        pub received: Mutex<HashMap<String, Vec<String>>>,
    }

    fn error(status: StatusCode, kind: &str) -> Response {
        (
            status,
            [
                ("x-amzn-errortype", kind),
                ("content-type", "application/json"),
            ],
            format!(r#"{{"message":"{kind}"}}"#),
        )
            .into_response()
    }

    async fn post_to_connection(
        State(fake): State<Arc<Fake>>,
        Path(id): Path<String>,
        body: Bytes,
    ) -> Response {
        if id.starts_with("forbidden") {
            return error(StatusCode::FORBIDDEN, "ForbiddenException");
        }
        if body.len() > 128 * 1024 {
            return error(StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLargeException");
        }
        if !fake.open.lock().unwrap().contains(&id) {
            return error(StatusCode::GONE, "GoneException");
        }
        let frame = String::from_utf8_lossy(&body).into_owned();
        fake.received
            .lock()
            .unwrap()
            .entry(id)
            .or_default()
            .push(frame);
        StatusCode::OK.into_response()
    }

    /// The fake's endpoint (as `EVENTS_MANAGEMENT_URL`), and its state.
    pub async fn start() -> (String, Arc<Fake>) {
        let fake = Arc::new(Fake::default());
        let router = Router::new()
            .route("/prod/@connections/{id}", post(post_to_connection))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        (format!("http://{addr}/prod"), fake)
    }
}

#[tokio::test]
async fn the_management_api_pusher_keeps_the_ports_contract() {
    let (endpoint, fake) = management_api::start().await;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let pusher = ManagementApiPusher::new(&sdk, &endpoint);
    let open = async || {
        let id = ConnectionId::parse(&format!("conn{}", uuid::Uuid::new_v4().simple())).unwrap();
        fake.open.lock().unwrap().insert(id.as_str().to_owned());
        id
    };
    let received = async |id: &ConnectionId| {
        let received = fake.received.lock().unwrap();
        received.get(id.as_str()).cloned().unwrap_or_default()
    };
    let close = async |id: &ConnectionId| {
        fake.open.lock().unwrap().remove(id.as_str());
    };
    contracts::pushers::suite(&pusher, open, received, close).await;
    // A deployment without `execute-api:ManageConnections`: said, not taken for a closed one.
    let forbidden = ConnectionId::parse("forbidden-1").unwrap();
    assert_eq!(
        pusher.push(&forbidden, "{}").await,
        Err(PushError::Forbidden)
    );
}
