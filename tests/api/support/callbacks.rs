//! A client's callback receiver, as the tests run one: records every POST, and answers 500 to
//! the first ones it is told to fail; and the sweeps that deliver to it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use osurender_core::entry::wiring::callback_sender;
use osurender_core::{usecases::callbacks, App};
use reqwest::multipart::Form;
use serde_json::Value;
use sha2::Sha256;

use crate::support::app::TestApp;
use crate::support::keys::TestKey;
use crate::support::replays::{render_form, unique_replay};

/// One POST the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub signature: String,
    pub body: Vec<u8>,
    pub json: Value,
}

impl Received {
    pub fn sequence(&self) -> i64 {
        self.json["sequence"].as_i64().unwrap()
    }

    pub fn status(&self) -> &str {
        self.json["status"].as_str().unwrap()
    }

    /// Whether the signature is `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` with a
    /// timestamp within a minute of now.
    pub fn signed_with(&self, secret: &str) -> bool {
        let Some((t, v1)) = self
            .signature
            .strip_prefix("t=")
            .and_then(|rest| rest.split_once(",v1="))
        else {
            return false;
        };
        let Ok(timestamp) = t.parse::<u64>() else {
            return false;
        };
        let now = crate::support::jobs::now();
        if timestamp.abs_diff(now) > 60 {
            return false;
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(&self.body);
        hex::decode(v1).is_ok_and(|v1| mac.verify_slice(&v1).is_ok())
    }
}

/// What each callback said, in the order received: its sequence and status.
pub fn sequences(received: &[Received]) -> Vec<(i64, &str)> {
    received
        .iter()
        .map(|r| (r.sequence(), r.status()))
        .collect()
}

#[derive(Clone, Default)]
struct Inbox {
    received: Arc<Mutex<Vec<Received>>>,
    failures_left: Arc<AtomicUsize>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    inbox: Inbox,
}

impl Receiver {
    /// A receiver on loopback that answers 500 to its first `failures` POSTs, then 200.
    pub async fn start(failures: usize) -> Receiver {
        let inbox = Inbox::default();
        inbox.failures_left.store(failures, Ordering::SeqCst);
        let router = Router::new()
            .route("/{*path}", post(receive))
            .with_state(inbox.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Receiver { addr, inbox }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.inbox.received.lock().unwrap().clone()
    }
}

async fn receive(State(inbox): State<Inbox>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get("x-osurender-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    inbox.received.lock().unwrap().push(Received {
        signature,
        json: serde_json::from_slice(&body).unwrap_or(Value::Null),
        body: body.to_vec(),
    });
    let failing = inbox
        .failures_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok();
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

/// A listener that counts the connections made to it and answers none: where a refused
/// callback must never connect.
pub struct Trap {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Trap {
    pub async fn start() -> Trap {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        Trap { addr, connections }
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A render form of a fresh replay with this `callback_url`.
pub fn callback_form(url: &str) -> Form {
    render_form(unique_replay(), "play.osr", &[("callback_url", url)])
}

impl TestApp {
    /// A render by `key` for `client_ip` with this `callback_url`, admitted: the job's id.
    pub async fn submit_with_callback(&self, client_ip: &str, key: &TestKey, url: &str) -> String {
        self.submit_with(client_ip, &key.bearer, callback_form(url))
            .await
    }
}

/// Callback sweeps until one claims nothing; how many were sent successfully.
pub async fn sweep_callbacks(app: &App) -> u64 {
    let sender = callback_sender(&app.config);
    let mut dispatched = 0;
    loop {
        let report = callbacks::sweep(app, &sender).await.unwrap();
        dispatched += report.dispatched;
        if report.claimed == 0 {
            return dispatched;
        }
    }
}
