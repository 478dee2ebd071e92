//! The live events' WebSocket on the dev server (`GET /v1/events`): the same use case as the
//! `events` function behind API Gateway, its frames sent through the in-process `LocalSockets`.
//! Pushes go out on the dispatcher's wakes when there is a wake queue, as on AWS, and, while a
//! socket is open, on a short poll of the push queue, so a plain `infra/run-local` (no wake
//! queue) pushes within a second too.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures_util::{SinkExt, StreamExt};
use osurender_core::adapters::local_sockets::LocalSockets;
use osurender_core::domain::events::ConnectionId;
use osurender_core::ports::events::MAX_FRAME_BYTES;
use osurender_core::support::problem::Rejection;
use osurender_core::usecases::events;
use osurender_core::App;

/// How often the push queue is swept while a socket is open.
const PUSH_POLL: Duration = Duration::from_millis(250);

/// The server's sockets, and how many are open.
#[derive(Default)]
pub struct Sockets {
    pub pusher: Arc<LocalSockets>,
    open: AtomicUsize,
}

/// The route, under the service's layers (the origin secret among them, as API Gateway's
/// `$connect` checks it).
pub fn routes(sockets: Arc<Sockets>) -> Router<App> {
    Router::new()
        .route("/v1/events", get(upgrade))
        .layer(Extension(sockets))
}

/// Sweeps the push queue every `PUSH_POLL` while a socket is open, for as long as the runtime
/// lives.
pub fn push_while_watched(app: App, sockets: Arc<Sockets>) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PUSH_POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if sockets.open.load(Ordering::Relaxed) == 0 {
                continue;
            }
            match events::sweep_pushes(&app).await {
                Ok(report) if report.claimed > 0 => tracing::debug!(?report, "push poll"),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "push poll failed"),
            }
        }
    });
}

/// The upgrade is `$connect`: counted in the caller's connect windows, refused with their 429.
async fn upgrade(
    State(app): State<App>,
    Extension(sockets): Extension<Arc<Sockets>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return Rejection::InvalidBody(
            "/v1/events is a WebSocket: open it with a WebSocket client (an Upgrade request)"
                .into(),
        )
        .into_response();
    };
    let id = sockets.pusher.new_connection_id();
    let caller = app.anonymous_caller(peer.ip(), &headers);
    if let Err(rejection) = events::connect(&app, &id, &caller).await {
        return rejection.into_response();
    }
    // API Gateway's largest message: a larger one closes the connection there too.
    upgrade
        .max_message_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| serve(app, sockets, id, socket))
}

/// Frames in as `$default`/`subscribe`/`unsubscribe`, pushes out, then `$disconnect`.
async fn serve(app: App, sockets: Arc<Sockets>, id: ConnectionId, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let mut outgoing = sockets.pusher.register(&id);
    sockets.open.fetch_add(1, Ordering::Relaxed);
    let writer = tokio::spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if sink.send(Message::Text(frame.into())).await.is_err() {
                break;
            }
        }
    });
    while let Some(Ok(message)) = stream.next().await {
        match message {
            Message::Text(text) => events::receive(&app, &id, text.as_bytes()).await,
            Message::Binary(bytes) => events::receive(&app, &id, &bytes).await,
            Message::Close(_) => break,
            // Pings are answered by the socket itself.
            Message::Ping(_) | Message::Pong(_) => {}
        }
    }
    sockets.pusher.unregister(&id);
    sockets.open.fetch_sub(1, Ordering::Relaxed);
    writer.abort();
    events::disconnect(&app, &id).await;
}
