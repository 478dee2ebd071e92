//! The live events' WebSocket on the dev server (`GET /v1/events`): the same use case as the
//! `events` function behind API Gateway, its frames sent through the in-process `LocalSockets`.

use std::net::SocketAddr;
use std::sync::Arc;

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

/// The route, under the service's layers (the origin secret among them, as API Gateway's
/// `$connect` checks it).
pub fn routes(sockets: Arc<LocalSockets>) -> Router<App> {
    Router::new()
        .route("/v1/events", get(upgrade))
        .layer(Extension(sockets))
}

/// The upgrade is `$connect`: counted in the caller's connect windows, refused with their 429.
async fn upgrade(
    State(app): State<App>,
    Extension(sockets): Extension<Arc<LocalSockets>>,
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
    let id = sockets.new_connection_id();
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
async fn serve(app: App, sockets: Arc<LocalSockets>, id: ConnectionId, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let mut outgoing = sockets.register(&id);
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
    sockets.unregister(&id);
    writer.abort();
    events::disconnect(&app, &id).await;
}
