//! A local Lambda Runtime API (the 2018-06-01 interface a function's runtime polls), and a
//! function's built binary run under it: a test hands it events one by one and reads the
//! answers, as Lambda would. What a function does besides answering (a CloudFormation
//! `ResponseURL`, a callback) the test serves with routes of its own on the same address.
//!
//! ```text
//! let function = Function::of(env!("CARGO_BIN_EXE_migrate"), "migrate")
//!     .vars(&[("DATABASE_URL", &url)])
//!     .start("up")
//!     .await;
//! let answer = function.invoke("up-1", json!({...}), Duration::from_secs(60)).await;
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::Notify;

/// How long an invocation may run, as its deadline header tells the function.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(300);

/// What a function answered to an invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Posted to `…/response`: the function's result.
    Response(Value),
    /// Posted to `…/error`: the invocation failed.
    Error(Value),
    /// Posted to `…/init/error`: the function could not start, so answers nothing.
    InitError(Value),
}

#[derive(Default)]
struct Shared {
    /// Events not yet taken by the function, with their request ids.
    events: Mutex<VecDeque<(String, Value)>>,
    event_ready: Notify,
    /// Answers by request id (`None`: an init error), in arrival order.
    answers: Mutex<Vec<(Option<String>, Answer)>>,
    answered: Notify,
}

impl Shared {
    fn record(&self, request_id: Option<String>, answer: Answer) {
        self.answers.lock().unwrap().push((request_id, answer));
        self.answered.notify_waiters();
    }
}

/// The Runtime API on a port of 127.0.0.1 (and the test's own routes beside it).
pub struct RuntimeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Which function the invocations name (`…:function:<name>`).
    function: String,
}

impl RuntimeApi {
    /// Serves the Runtime API for a function called `function`, with `routes` beside it.
    pub async fn start(function: &str, routes: Router) -> RuntimeApi {
        let shared = Arc::new(Shared::default());
        let api = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state((shared.clone(), function.to_owned()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, api.merge(routes)).await });
        RuntimeApi {
            addr,
            shared,
            function: function.to_owned(),
        }
    }

    /// What `AWS_LAMBDA_RUNTIME_API` is set to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `path` of this server (one of the test's routes).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Queues `event` for the function as invocation `request_id`.
    pub fn send(&self, request_id: &str, event: Value) {
        self.shared
            .events
            .lock()
            .unwrap()
            .push_back((request_id.to_owned(), event));
        self.shared.event_ready.notify_waiters();
    }

    /// The answer to invocation `request_id` (or the function's init error), once it came;
    /// `None` if none came `within`.
    pub async fn answer(&self, request_id: &str, within: Duration) -> Option<Answer> {
        tokio::time::timeout(within, async {
            loop {
                let answered = self.shared.answered.notified();
                let found = self
                    .shared
                    .answers
                    .lock()
                    .unwrap()
                    .iter()
                    .find_map(|(id, answer)| {
                        (id.as_deref().is_none_or(|id| id == request_id)).then(|| answer.clone())
                    });
                if let Some(answer) = found {
                    return answer;
                }
                answered.await;
            }
        })
        .await
        .ok()
    }

    /// The function's name, as its invocations' ARN names it.
    pub fn function(&self) -> &str {
        &self.function
    }
}

type ApiState = State<(Arc<Shared>, String)>;

async fn next_invocation(State((shared, function)): ApiState) -> impl IntoResponse {
    loop {
        let notified = shared.event_ready.notified();
        let next = shared.events.lock().unwrap().pop_front();
        if let Some((request_id, event)) = next {
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                + INVOCATION_TIMEOUT;
            let mut headers = HeaderMap::new();
            headers.insert("lambda-runtime-aws-request-id", request_id.parse().unwrap());
            headers.insert(
                "lambda-runtime-deadline-ms",
                deadline.as_millis().to_string().parse().unwrap(),
            );
            headers.insert(
                "lambda-runtime-invoked-function-arn",
                format!("arn:aws:lambda:us-east-1:123456789012:function:{function}")
                    .parse()
                    .unwrap(),
            );
            return (headers, event.to_string());
        }
        notified.await;
    }
}

/// A body as JSON, or as a JSON string if it is none.
fn json(body: &Bytes) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn response(State((shared, _)): ApiState, Path(id): Path<String>, body: Bytes) -> StatusCode {
    shared.record(Some(id), Answer::Response(json(&body)));
    StatusCode::ACCEPTED
}

async fn error(State((shared, _)): ApiState, Path(id): Path<String>, body: Bytes) -> StatusCode {
    shared.record(Some(id), Answer::Error(json(&body)));
    StatusCode::ACCEPTED
}

async fn init_error(State((shared, _)): ApiState, body: Bytes) -> StatusCode {
    shared.record(None, Answer::InitError(json(&body)));
    StatusCode::ACCEPTED
}

/// How to run a function's binary: see `Function::of`.
pub struct Launch {
    binary: String,
    name: String,
    vars: Vec<(String, String)>,
    routes: Router,
}

impl Launch {
    /// More environment for the function (a later value of a variable wins).
    pub fn vars(mut self, vars: &[(&str, &str)]) -> Self {
        self.vars.extend(
            vars.iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
        );
        self
    }

    /// Routes the test serves beside the Runtime API (`RuntimeApi::url` reaches them).
    pub fn routes(mut self, routes: Router) -> Self {
        self.routes = self.routes.merge(routes);
        self
    }

    /// Starts the binary under a Runtime API of its own; its output goes to a log file named
    /// after `tag` (`Function::log`).
    pub async fn start(self, tag: &str) -> Function {
        let runtime = RuntimeApi::start(&self.name, self.routes).await;
        let log = std::env::temp_dir()
            .join(format!(
                "{}-lambda-{tag}-{}.log",
                self.name,
                std::process::id()
            ))
            .display()
            .to_string();
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new(&self.binary)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", runtime.addr().to_string())
            .env(
                "AWS_LAMBDA_FUNCTION_NAME",
                format!("osurender-test-{}", self.name),
            )
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("RUST_LOG", "info")
            .envs(self.vars)
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", self.binary));
        Function {
            runtime,
            child,
            log,
        }
    }
}

/// A function's process under its own Runtime API, killed when dropped.
pub struct Function {
    runtime: RuntimeApi,
    child: Child,
    log: String,
}

impl Function {
    /// The built `binary` (`env!("CARGO_BIN_EXE_<name>")`) of the function called `name`, to be
    /// run with only the Lambda environment (and the stand-in's region and credentials).
    pub fn of(binary: &str, name: &str) -> Launch {
        Launch {
            binary: binary.to_owned(),
            name: name.to_owned(),
            vars: Vec::new(),
            routes: Router::new(),
        }
    }

    pub fn runtime(&self) -> &RuntimeApi {
        &self.runtime
    }

    /// The file its stdout and stderr go to.
    pub fn log(&self) -> &str {
        &self.log
    }

    /// Hands it `event` as invocation `request_id` and waits for its answer; fails the test,
    /// naming the log, if none comes `within`.
    pub async fn invoke(&self, request_id: &str, event: Value, within: Duration) -> Answer {
        self.runtime.send(request_id, event);
        self.runtime
            .answer(request_id, within)
            .await
            .unwrap_or_else(|| {
                panic!(
                    "{request_id} not answered within {within:?}; log: {}",
                    self.log
                )
            })
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
