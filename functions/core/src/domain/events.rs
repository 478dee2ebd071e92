//! Live job events over a WebSocket (docs/API.md "Live events"): the frames a client sends and
//! those it is sent, and the names a subscription is kept under. JSON text frames both ways.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::client::ClientKey;
use super::job::JobId;
use super::key::ApiKey;

/// The most subscriptions one connection may hold (jobs and keys together).
pub const MAX_SUBSCRIPTIONS: usize = 100;

/// The longest client frame read; a longer one is `invalid_message` (a subscribe frame is
/// well under 200 bytes).
pub const MAX_CLIENT_FRAME_BYTES: usize = 4096;

/// The longest connection id taken: API Gateway's are 16 characters, the dev server's 32.
const MAX_CONNECTION_ID: usize = 128;

/// A WebSocket connection, as API Gateway (or the dev server) names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a connection id")]
pub struct InvalidConnectionId;

impl ConnectionId {
    /// A connection id: 1 to 128 printable ASCII characters, no space (it is part of a key and
    /// of a URL path).
    pub fn parse(text: &str) -> Result<Self, InvalidConnectionId> {
        let printable = text.bytes().all(|b| b.is_ascii_graphic());
        match !text.is_empty() && text.len() <= MAX_CONNECTION_ID && printable {
            true => Ok(Self(text.to_owned())),
            false => Err(InvalidConnectionId),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The client its frames are counted by (the frame rate is per connection).
    pub fn frame_counter(&self) -> ClientKey {
        ClientKey::connection(&self.0)
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a subscription follows: one job, or every job of one API key's client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    Job(JobId),
    Key(ClientKey),
}

impl Topic {
    /// Its name in the connection store: `job#<uuid>` or `key#key:<uuid>`.
    pub fn name(&self) -> String {
        match self {
            Self::Job(id) => format!("job#{id}"),
            Self::Key(client) => format!("key#{}", client.as_str()),
        }
    }

    /// The topic a stored name is, if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        if let Some(id) = name.strip_prefix("job#") {
            return id.parse().ok().map(Self::Job);
        }
        let client = name.strip_prefix("key#")?;
        ClientKey::key_client(client).map(Self::Key)
    }
}

/// What a client frame names: a job by its id (a capability, as for `GET /v1/jobs/{id}`), or
/// an API key whose jobs it follows. The key travels in the frame, never in a URL.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Job(JobId),
    Key(ApiKey),
}

/// A client frame, once read.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientFrame {
    Subscribe(Target),
    Unsubscribe(Target),
    /// Keeps an idle connection open (API Gateway closes one idle 10 minutes): answered `pong`.
    Ping,
}

/// Why a client frame could not be read: said in an `invalid_message` error frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidFrame(pub String);

/// Why a key in a frame is refused: said in an `invalid_api_key` error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("`key` is not an API key (expected `osr_live_` or `osr_test_` and 43 letters or digits)")]
pub struct MalformedFrameKey;

/// What a frame's JSON may hold; anything else in it is ignored.
#[derive(Deserialize)]
struct RawFrame {
    action: Option<String>,
    job_id: Option<serde_json::Value>,
    key: Option<serde_json::Value>,
}

impl ClientFrame {
    /// Reads a frame: a JSON object with `action` `ping`, or `subscribe` or `unsubscribe` and
    /// exactly one of `job_id` and `key`, both strings.
    pub fn parse(bytes: &[u8]) -> Result<Result<Self, MalformedFrameKey>, InvalidFrame> {
        let invalid = |why: &str| InvalidFrame(why.to_owned());
        if bytes.len() > MAX_CLIENT_FRAME_BYTES {
            return Err(InvalidFrame(format!(
                "a frame is at most {MAX_CLIENT_FRAME_BYTES} bytes"
            )));
        }
        let raw: RawFrame = match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(value @ serde_json::Value::Object(_)) => serde_json::from_value(value)
                .map_err(|_| invalid("the frame's fields are not what the protocol says"))?,
            Ok(_) => return Err(invalid("a frame is a JSON object")),
            Err(_) => return Err(invalid("the frame is not JSON")),
        };
        let subscribe = match raw.action.as_deref() {
            Some("subscribe") => true,
            Some("unsubscribe") => false,
            Some("ping") => return Ok(Ok(Self::Ping)),
            Some(other) => {
                return Err(InvalidFrame(format!(
                    "unknown action `{}`: `subscribe`, `unsubscribe` or `ping`",
                    other.chars().take(40).collect::<String>()
                )))
            }
            None => return Err(invalid("`action` is missing")),
        };
        let text = |value: serde_json::Value, field: &str| match value {
            serde_json::Value::String(text) => Ok(text),
            _ => Err(InvalidFrame(format!("`{field}` is a string"))),
        };
        let target = match (raw.job_id, raw.key) {
            (Some(id), None) => {
                let id = text(id, "job_id")?;
                let id = id
                    .parse()
                    .map_err(|_| invalid("`job_id` is not a job id (a UUID)"))?;
                Ok(Target::Job(id))
            }
            (None, Some(key)) => match ApiKey::parse(&text(key, "key")?) {
                Ok(key) => Ok(Target::Key(key)),
                Err(_) => Err(MalformedFrameKey),
            },
            (Some(_), Some(_)) => return Err(invalid("one of `job_id` and `key`, not both")),
            (None, None) => return Err(invalid("`job_id` or `key` is missing")),
        };
        Ok(target.map(|target| match subscribe {
            true => Self::Subscribe(target),
            false => Self::Unsubscribe(target),
        }))
    }
}

/// An error frame's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, an unknown action, a missing or malformed field.
    InvalidMessage,
    /// No such job.
    NotFound,
    /// A key that is malformed, unknown or revoked.
    InvalidApiKey,
    /// The connection already holds `MAX_SUBSCRIPTIONS`.
    TooManySubscriptions,
    /// Frames over the connection's rate (`RATE_LIMIT_EVENTS_FRAMES`): this one was not read.
    RateLimited,
    /// A store did not answer: the frame may be sent again.
    Unavailable,
}

/// A frame the server sends.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// A subscription holds (sent again for one already held).
    Subscribed(Subject),
    /// A subscription is gone (or was never held).
    Unsubscribed(Subject),
    /// A job's state: first its state at subscription, then one per change.
    Job(JobEvent),
    /// A frame was refused; the connection stays open.
    Error { code: ErrorCode, detail: String },
    /// The answer to a `ping`.
    Pong,
}

impl ServerFrame {
    pub fn error(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::Error {
            code,
            detail: detail.into(),
        }
    }

    /// The frame as sent: JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"type":"error","code":"unavailable","detail":"the frame could not be written"}"#
                .to_owned()
        })
    }
}

/// What a `subscribed` or `unsubscribed` frame is about: the job, or the key (by its id: the
/// secret is never sent back).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Subject {
    Job { job_id: JobId },
    Key { key_id: String },
}

/// A job's state as a `job` frame carries it: the callback body's fields.
#[derive(Debug, Clone, Serialize)]
pub struct JobEvent {
    pub job_id: JobId,
    pub status: super::job::JobStatus,
    pub progress: f32,
    /// Grows with each change of the job: a client drops a frame whose sequence it has seen
    /// and sees a gap where changes were coalesced.
    pub sequence: i64,
    pub replay: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// The client's own label for the job, if it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_reference: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "osr_live_0123456789abcdefghijABCDEFGHIJklmnopqrstuvw";

    fn parse(text: &str) -> Result<Result<ClientFrame, MalformedFrameKey>, InvalidFrame> {
        ClientFrame::parse(text.as_bytes())
    }

    #[test]
    fn a_subscribe_frame_names_a_job_or_a_key() {
        let id = JobId::new();
        let frame = parse(&format!(r#"{{"action":"subscribe","job_id":"{id}"}}"#));
        assert_eq!(frame, Ok(Ok(ClientFrame::Subscribe(Target::Job(id)))));
        let frame = parse(&format!(
            r#"{{"action":"unsubscribe","key":"{KEY}","x":1}}"#
        ));
        let key = ApiKey::parse(KEY).unwrap();
        assert_eq!(frame, Ok(Ok(ClientFrame::Unsubscribe(Target::Key(key)))));
        assert_eq!(parse(r#"{"action":"ping"}"#), Ok(Ok(ClientFrame::Ping)));
    }

    #[test]
    fn a_bad_frame_says_why() {
        let id = JobId::new();
        for (text, why) in [
            ("not json", "not JSON"),
            ("[1]", "JSON object"),
            (r#"{"job_id":"x"}"#, "`action` is missing"),
            (
                r#"{"action":"watch","job_id":"x"}"#,
                "unknown action `watch`",
            ),
            (r#"{"action":"subscribe"}"#, "is missing"),
            (r#"{"action":"subscribe","job_id":"nope"}"#, "not a job id"),
            (r#"{"action":"subscribe","job_id":7}"#, "is a string"),
            (r#"{"action":7,"job_id":"x"}"#, "fields are not"),
            (
                &format!(r#"{{"action":"subscribe","job_id":"{id}","key":"{KEY}"}}"#),
                "not both",
            ),
        ] {
            match parse(text) {
                Err(InvalidFrame(detail)) => assert!(detail.contains(why), "{text}: {detail}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let long = format!(r#"{{"action":"subscribe","pad":"{}"}}"#, "x".repeat(5000));
        assert!(parse(&long).is_err());
        assert_eq!(
            parse(r#"{"action":"subscribe","key":"osr_live_short"}"#),
            Ok(Err(MalformedFrameKey))
        );
    }

    #[test]
    fn topics_are_named_and_read_back() {
        let job = Topic::Job(JobId::new());
        let key = Topic::Key(crate::domain::KeyId::new().client());
        for topic in [job, key] {
            assert_eq!(Topic::from_name(&topic.name()), Some(topic));
        }
        assert_eq!(Topic::from_name("key#10.0.0.1"), None);
        assert_eq!(Topic::from_name("conn#x"), None);
    }

    #[test]
    fn a_connection_id_is_printable_and_short() {
        assert!(ConnectionId::parse("L0SM9cOFvHcCIhw=").is_ok());
        for bad in ["", "a b", &"x".repeat(129), "é"] {
            assert_eq!(ConnectionId::parse(bad), Err(InvalidConnectionId), "{bad}");
        }
    }

    #[test]
    fn server_frames_are_tagged_by_type() {
        let id = JobId::new();
        let frame = ServerFrame::Subscribed(Subject::Job { job_id: id }).to_json();
        assert_eq!(frame, format!(r#"{{"type":"subscribed","job_id":"{id}"}}"#));
        let frame = ServerFrame::error(ErrorCode::TooManySubscriptions, "at most 100").to_json();
        assert_eq!(
            frame,
            r#"{"type":"error","code":"too_many_subscriptions","detail":"at most 100"}"#
        );
        assert_eq!(ServerFrame::Pong.to_json(), r#"{"type":"pong"}"#);
    }
}
