//! A live-event WebSocket client, as a bot or a CLI opens one: JSON frames out, JSON frames in,
//! each wait bounded.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::support::app::TestApp;

/// How long a test waits for one frame.
pub const FRAME_WAIT: Duration = Duration::from_secs(15);

pub struct Socket {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl TestApp {
    /// The live events' URL this server shows (`links.events`).
    pub fn events_url(&self) -> String {
        format!("ws://{}/v1/events", self.addr)
    }

    /// A connection to the live events, as if Cloudflare forwarded it for `client_ip`; the
    /// upgrade's error answer when it is refused.
    pub async fn try_events(&self, client_ip: &str) -> Result<Socket, reqwest::StatusCode> {
        let mut request = self.events_url().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("CF-Connecting-IP", client_ip.parse().unwrap());
        match tokio_tungstenite::connect_async(request).await {
            Ok((stream, _)) => Ok(Socket { stream }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(reqwest::StatusCode::from_u16(response.status().as_u16()).unwrap())
            }
            Err(error) => panic!("connecting to the live events: {error}"),
        }
    }

    pub async fn events(&self, client_ip: &str) -> Socket {
        self.try_events(client_ip).await.expect("connected")
    }
}

impl Socket {
    pub async fn send_text(&mut self, text: &str) {
        self.stream
            .send(Message::Text(text.into()))
            .await
            .expect("frame sent");
    }

    pub async fn send(&mut self, frame: Value) {
        self.send_text(&frame.to_string()).await;
    }

    pub async fn subscribe_job(&mut self, job_id: &str) {
        self.send(json!({ "action": "subscribe", "job_id": job_id }))
            .await;
    }

    /// Subscribes to `job_id` and reads the answer: `subscribed`, then the job's state.
    pub async fn follow_job(&mut self, job_id: &str) -> Value {
        self.subscribe_job(job_id).await;
        let subscribed = self.next().await;
        assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
        let state = self.next().await;
        assert_eq!(state["type"], "job", "{state}");
        state
    }

    /// Subscribes with the key a `Bearer …` header carries.
    pub async fn subscribe_key(&mut self, bearer: &str) {
        let key = bearer.strip_prefix("Bearer ").unwrap_or(bearer);
        self.send(json!({ "action": "subscribe", "key": key }))
            .await;
    }

    /// The next frame, within `FRAME_WAIT`.
    pub async fn next(&mut self) -> Value {
        self.next_within(FRAME_WAIT)
            .await
            .unwrap_or_else(|| panic!("no frame within {FRAME_WAIT:?}"))
    }

    /// The next frame, if one comes within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let message = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .ok()?
                .expect("the connection stays open")
                .expect("a frame");
            match message {
                Message::Text(text) => {
                    return Some(serde_json::from_str(&text).expect("a JSON frame"))
                }
                Message::Close(close) => panic!("the server closed the connection: {close:?}"),
                _ => continue,
            }
        }
    }

    /// The next `error` frame's code (any other frame first is a failure).
    pub async fn error_code(&mut self) -> String {
        let frame = self.next().await;
        assert_eq!(frame["type"], "error", "{frame}");
        assert!(frame["detail"].as_str().is_some_and(|d| !d.is_empty()));
        frame["code"].as_str().unwrap().to_owned()
    }

    /// `job` frames until one of `job_id` has `status`, each within `FRAME_WAIT`: all of them,
    /// in order (other frames are kept too).
    pub async fn until_status(&mut self, job_id: &str, status: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let frame = self.next().await;
            let done =
                frame["type"] == "job" && frame["job_id"] == job_id && frame["status"] == status;
            seen.push(frame);
            if done {
                return seen;
            }
        }
    }
}
